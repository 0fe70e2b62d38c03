"""Jobs: the contract, the targets that run them, and recording."""
