"""Unit tests: pure functions and single objects, in this process or one short subprocess. No Pulumi program run, no
Ray cluster, no gloo process group of several ranks; local stand-ins (tests/support) where a client needs a server."""
