"""Mutation analysis of the protocol code (docs/mutation.md): small changes to the safety-relevant
modules of replication/ (mutants.py), each simulated in a child process that loads the one
mutated module in place of the original (child.py), scored by what the simulator, its
invariants and the checkers kill, and by what the unit tests kill (score.py), on local
processes or as Spark tasks, into a report (page.py)."""
