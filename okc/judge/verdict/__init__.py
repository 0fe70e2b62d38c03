"""What passes (SPEC 4.4): the rules, and the verifier process that applies them out of the candidate's reach."""
