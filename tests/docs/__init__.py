"""The README and docs/ followed as a newcomer reads them: their command sequences through tests/support/docs_shell.py's
shell and stand-ins, their samples, tables, figures and links against what the code does."""
