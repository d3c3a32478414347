"""Moves the modules of workload/ and infra/ into packages by concern and rewrites every reference to them.

Idempotent: a second run moves nothing and rewrites nothing that the first run wrote (run it again on files merged in
from branches made before the move)."""
import os, re, subprocess, sys

MOVES = {
    "workload.checkpoint": "workload.checkpoint.sharded",
    "workload.checkpoint_reader": "workload.checkpoint.reader",
    "workload.export": "workload.checkpoint.export",
    "workload.data": "workload.data.batches",
    "workload.sft.chat": "workload.data.chat",
    "workload.sft.dataset": "workload.data.examples",
    "workload.sft.packing": "workload.data.packing",
    "workload.sft.records": "workload.data.records",
    "workload.model": "workload.model.causal_lm",
    "workload.weights": "workload.model.weights",
    "workload.model_files": "workload.model.files",
    "workload.memory": "workload.model.memory",
    "workload.memory_plan": "workload.model.memory_plan",
    "workload.parallel": "workload.model.parallel",
    "workload.fp8": "workload.model.fp8",
    "workload.architectures": "workload.model.architectures",
    "workload.transport": "workload.fabric.transport",
    "workload.fabric": "workload.fabric.bandwidth",
    "workload.nccl_logs": "workload.fabric.nccl_logs",
    "workload.local": "workload.run.local",
    "workload.local_checks": "workload.run.checks",
    "workload.local_output": "workload.run.output",
    "workload.submit": "workload.run.submit",
    "workload.head_supervisor": "workload.run.head_supervisor",
    "workload.metrics": "workload.metrics.tensorboard",
    "workload.live_metrics": "workload.metrics.live",
    "infra.network": "infra.aws.network",
    "infra.cluster": "infra.aws.cluster",
    "infra.gpu_nodes": "infra.aws.gpu_nodes",
    "infra.capacity_reservation": "infra.aws.capacity_reservation",
    "infra.node_health": "infra.aws.node_health",
    "infra.pod_identity": "infra.aws.pod_identity",
    "infra.trust": "infra.aws.trust",
    "infra.aws_identity": "infra.aws.identity",
    "infra.addons": "infra.kubernetes.addons",
    "infra.admission": "infra.kubernetes.admission",
    "infra.ray_security": "infra.kubernetes.ray_security",
    "infra.monitoring": "infra.kubernetes.monitoring",
    "infra.raycluster": "infra.kubernetes.raycluster",
    "infra.idle_stop": "infra.kubernetes.idle_stop",
    "infra.idle_check": "infra.kubernetes.idle_check",
    "infra.portforward": "infra.kubernetes.portforward",
    "infra.preflight": "infra.job.preflight",
    "infra.ray_job": "infra.job.ray_job",
    "infra.pip_requirements": "infra.config.pip_requirements",
    "infra.naming": "infra.config.naming",
    "infra.instance_facts": "infra.preview.instance_facts",
    "infra.model_config": "infra.preview.model_config",
    "infra.feasibility": "infra.preview.feasibility",
}
# Commands users type (`python -m workload.local`): the old name stays as a thin entry module, so only imports of its
# contents and attribute paths are rewritten, never the bare name.
ENTRIES = {"workload.local", "workload.export", "workload.transport"}
PACKAGES = {"workload.sft": "workload.data", "workload.architectures": "workload.model.architectures",
            "infra.charts": "infra.kubernetes.charts"}
NEW_NAMES = set(MOVES.values()) | set(PACKAGES.values())
for name in list(NEW_NAMES):
    parts = name.split(".")
    NEW_NAMES |= {".".join(parts[:i]) for i in range(1, len(parts))}


def path_of(dotted, package=False):
    return dotted.replace(".", "/") + ("/" if package else ".py")


def is_package_source(dotted):
    return os.path.isdir(path_of(dotted, True)) and os.path.exists(path_of(dotted, True) + "__init__.py")


def move_files():
    for old, new in {**PACKAGES, **MOVES}.items():
        is_pkg = old in PACKAGES
        src = path_of(old, is_pkg).rstrip("/")
        dst = path_of(new, is_pkg).rstrip("/")
        if not os.path.exists(src) or (is_pkg and os.path.exists(dst) and not os.path.isdir(src + "/" )):
            continue
        if os.path.exists(dst) and not is_pkg:
            continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if is_pkg:
            os.makedirs(dst, exist_ok=True)
            for entry in os.listdir(src):
                if entry == "__pycache__":
                    continue
                target = os.path.join(dst, "__init__.py" if entry == "__init__.py" else entry)
                if entry == "__init__.py" and os.path.exists(target):
                    continue
                subprocess.run(["git", "mv", os.path.join(src, entry), target], check=True)
        else:
            # A module whose new home is a package of the same name (workload/data.py -> workload/data/batches.py):
            # moved aside first.
            subprocess.run(["git", "mv", src, dst], check=True)
    for new in NEW_NAMES:
        if new.count(".") >= 1 and new not in MOVES.values():
            d = path_of(new, True)
            if os.path.isdir(d) and not os.path.exists(d + "__init__.py"):
                open(d + "__init__.py", "w").write('"""TODO"""\n')
                subprocess.run(["git", "add", d + "__init__.py"], check=True)


ALL = {**MOVES, **PACKAGES}
_ORDER = sorted(ALL, key=len, reverse=True)
_DOTTED = re.compile(r"(?<![\w./])(" + "|".join(re.escape(o) for o in _ORDER) + r")(?![\w])((?:\.\w+)*)")


_IMPORTED = re.compile(r"\s+import\s+\(?\s*(\w+)")


def _dotted(match):
    old, rest = match.group(1), match.group(2)
    imported = _IMPORTED.match(match.string, match.end())
    if not rest and imported and old + "." + imported.group(1) in NEW_NAMES:
        return match.group(0)
    # Already a new name (workload.data.chat, infra.preview.feasibility.X)?
    if rest:
        first = old + "." + rest.split(".")[1]
        if first in NEW_NAMES:
            return match.group(0)
    if old in ENTRIES and not rest and not imported:
        return match.group(0)
    return ALL[old] + rest


_FROM = re.compile(r"^([ \t]*)from (workload|infra|workload\.sft|tools) import (\(([^)]*)\)|[^\n#]*?)([ \t]*#[^\n]*)?$", re.M)


def _from(match):
    indent, package, body, comment = match.group(1), match.group(2), match.group(4) or match.group(3), match.group(5) or ""
    names = [n.strip() for n in body.replace("\n", " ").split(",") if n.strip()]
    kept, lines = [], []
    for item in names:
        name, _, alias = item.partition(" as ")
        name, alias = name.strip(), alias.strip()
        full = f"{package}.{name}"
        if full in MOVES:
            new = MOVES[full]
            parent, leaf = new.rsplit(".", 1)
            local = alias or name
            lines.append(f"{indent}from {parent} import {leaf}" + (f" as {local}" if local != leaf else ""))
        elif full in PACKAGES:
            new = PACKAGES[full]
            parent, leaf = new.rsplit(".", 1)
            local = alias or name
            lines.append(f"{indent}from {parent} import {leaf}" + (f" as {local}" if local != leaf else ""))
        else:
            kept.append(item)
    if not lines:
        return match.group(0)
    if kept:
        lines.insert(0, f"{indent}from {package} import {', '.join(kept)}")
    lines[0] += comment
    return "\n".join(lines)


_PATHS = []
for old, new in ALL.items():
    if old in PACKAGES:
        _PATHS.append((path_of(old, True), path_of(new, True)))
    else:
        _PATHS.append((path_of(old), path_of(new)))
_PATHS.sort(key=lambda p: len(p[0]), reverse=True)
_PATH = re.compile(r"(?<![\w/])(" + "|".join(re.escape(o) for o, _ in _PATHS) + r")")
_PATH_MAP = dict(_PATHS)


def rewrite(text):
    text = _DOTTED.sub(_dotted, text)
    text = _FROM.sub(_from, text)
    text = _PATH.sub(lambda m: _PATH_MAP[m.group(1)], text)
    return text


def main(files):
    if not files:
        move_files()
        files = subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        if not f.endswith((".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".txt", ".cfg", ".json", "run")) or not os.path.isfile(f):
            continue
        if "/configs/" in f or f.startswith("tests/reference") or f.startswith("bench/results"):
            continue
        try:
            text = open(f).read()
        except UnicodeDecodeError:
            continue
        new = rewrite(text)
        if new != text:
            open(f, "w").write(new)


if __name__ == "__main__":
    main(sys.argv[1:])
