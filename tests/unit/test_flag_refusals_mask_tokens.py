"""Every training flag (workload.local's and workload.train's, one declaration each in workload/config/), given a
value shaped like a credential, is accepted or refused through workload/cli.py's one error exit without the
credential on stderr: in-process, up to the parse and the config's checks (nothing past them runs). Three shapes: a
vendor's (xAI's xai-), one no rule names (the generic rule's), and a URI's user:password@."""
from __future__ import annotations

import pytest

from workload import cli
from workload.config import DECLARED
from workload.run.local import parse_command

HIDDEN = "Hy6Cv1Pn8Ds"
TOKENS = {
    "vendor": f"xai-{HIDDEN}{HIDDEN}{HIDDEN}Qm",
    "unlisted": f"wk-{HIDDEN}Mb5{HIDDEN}",
    "uri": f"s3://AKIDEXAMPLE00:{HIDDEN}@team-bucket/runs",
}
FLAGS = sorted([f"--{declared.name}" for declared in DECLARED] + ["--config"])


def _parse_only(argv):
    parse_command(argv)
    return cli.OK


@pytest.mark.parametrize("shape", sorted(TOKENS))
def test_no_training_flag_echoes_a_credential(shape, capsys):
    refused = []
    for flag in FLAGS:
        for argv in ([flag, TOKENS[shape]], [f"{flag}={TOKENS[shape]}"]):
            try:
                code = cli.run(_parse_only, argv)
            except SystemExit as exited:  # argparse's own exit, through cli's parser: also after _fail
                code = exited.code
            captured = capsys.readouterr()
            assert HIDDEN not in captured.err + captured.out, f"{argv[0][:40]}: echoed: {captured.err[:300]}"
            if code != cli.OK:
                assert code == cli.USAGE, f"{flag}: exit {code}: {captured.err[:200]}"
                refused.append(flag)
    assert len(set(refused)) > len(FLAGS) // 2, sorted(set(refused))
