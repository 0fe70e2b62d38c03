"""Wrong: raises while being imported.

Rule: import
"""

raise ImportError("this candidate needs a kernel library that is not installed")
