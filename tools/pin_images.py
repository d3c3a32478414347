"""The images the stack runs and how to pin each by digest (infra/kubernetes/image_pins.py): each image's resolved
reference (the tag its chart renders where the stack sets none), where its digest goes and in which form the chart takes
it, and, for every image without a digest, the command that reads it from the registry. Run it where the registries
can be reached, then put each digest into image_pins.py beside its tag as `sha256:<hex>` (the program writes each
chart's slot in the form that chart takes), and the DLC's into dlcImage as repo:tag@sha256:...

    python -m tools.pin_images            # exit 1 while any image has no digest
"""
from __future__ import annotations

import sys
from typing import Sequence

from infra.kubernetes import image_pins
from workload import cli

FORMS = {image_pins.SlotForm.HEX: "hex only", image_pins.SlotForm.DIGEST: "sha256:hex",
         image_pins.SlotForm.TAG: "tag@sha256:hex"}


def slot(pin: image_pins.ImagePin) -> str:
    """Where the pin's digest reaches the pods, and the form that place takes."""
    if not pin.chart:
        return "the image reference"
    key = ".".join((*pin.values_path, pin.digest_key or "tag"))
    return f"{pin.chart} {key} ({FORMS[pin.form]})"


def lines(pins: tuple[image_pins.ImagePin, ...] = image_pins.ALL_IMAGES) -> list[str]:
    rows = [["IMAGE (RESOLVED)", "DIGEST", "SLOT", "READ IT WITH"]]
    for pin in pins:
        tagged = f"{pin.repository}:{pin.resolved_tag}"
        if pin.digest:
            rows.append([pin.reference(), pin.digest, slot(pin), ""])
        elif pin.resolved_tag:
            rows.append([pin.reference(), "-", slot(pin),
                         f"crane digest {tagged}  (or: docker buildx imagetools inspect {tagged})"])
        else:
            rows.append([pin.repository, "-", slot(pin), f"the tag is the chart's appVersion ({pin.source}): "
                                                          "`helm show chart` at the pinned version, then crane digest "
                                                          "REPO:TAG"])
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
