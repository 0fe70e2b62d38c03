"""The lab: its settings, its candidates, its ledger."""
