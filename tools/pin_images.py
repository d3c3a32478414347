"""The images the stack runs and how to pin each by digest (infra/kubernetes/image_pins.py): for every image without
a digest, the command that reads it from the registry. Run it where the registries can be reached, then put each
digest into image_pins.py beside its tag (and the DLC's into dlcImage as repo:tag@sha256:...).

    python -m tools.pin_images            # exit 1 while any image has no digest
"""
from __future__ import annotations

import sys
from typing import Sequence

from infra.kubernetes import image_pins
from workload import cli


def lines(pins: tuple[image_pins.ImagePin, ...] = image_pins.ALL_IMAGES) -> list[str]:
    rows = [["IMAGE", "DIGEST", "READ IT WITH"]]
    for pin in pins:
        if pin.digest:
            rows.append([pin.reference(), pin.digest, ""])
        elif pin.tag:
            rows.append([pin.reference(), "-", f"crane digest {pin.repository}:{pin.tag}  "
                                                f"(or: docker buildx imagetools inspect {pin.repository}:{pin.tag})"])
        else:
            rows.append([pin.repository, "-", f"the tag is the chart's appVersion ({pin.source}): `helm show chart` "
                                              "at the pinned version, then crane digest REPO:TAG"])
    return cli.table(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = cli.parser("python -m tools.pin_images", __doc__, check_failed="some image has no digest yet")
    parser.parse_args(argv)
    print("\n".join(lines()))
    missing = image_pins.unpinned()
    if missing:
        print(f"\n{len(missing)} of {len(image_pins.ALL_IMAGES)} images are pinned by tag only; fill in their digests "
              "in infra/kubernetes/image_pins.py (docs/security.md, 'Images').", file=sys.stderr)
    return cli.CHECK_FAILED if missing else cli.OK


if __name__ == "__main__":
    sys.exit(cli.run(main))
