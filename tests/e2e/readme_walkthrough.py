#!/usr/bin/env python3
"""A newcomer's walk through the README: every `build/lingbot-map` command of its "Using it"
section, run on the tiny synthetic model and the fixture frames.

Usage: readme_walkthrough.py LINGBOT_MAP README.md FIXTURES

Each command is run as written but for what a newcomer would change too: the model becomes the
tiny synthetic one, inputs become the fixture frames (or a video the demo renders), outputs go
to a scratch folder, and long runs are cut to a few frames. A command fails the walkthrough when
it crashes (a signal), prints a traceback, prints nothing, or names an internal tensor in a
message (a dtype and shape such as "F32 [8, 3, 126, 225]"). A clean one-line error is accepted
where the machine lacks what the command needs (a camera, a stream, a GPU). Prints
"N passed, N failed" at the end and exits 1 on any failure.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

INTERNAL = re.compile(r"\b(F32|BF16|F16|U8|I64|F8E4M3)\s*\[\d+(, \d+)*\]|Tensor\b|tensor\(")
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|terminate called|Aborted|Segmentation")


def readme_commands(readme):
    """The `build/lingbot-map ...` lines of the "Using it" section's shell blocks."""
    text = open(readme, encoding="utf-8").read()
    section = text.split("\n## Using it", 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line.startswith("build/lingbot-map "):
                commands.append(line)
    return commands


def adapt(argv, env):
    """The command as the walkthrough runs it; None to skip it (with the reason in env)."""
    out = []
    i = 0
    sub = argv[1]
    while i < len(argv):
        a = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if a == "--model":
            out += ["--model", env["model"]]
            if "--arch" not in argv:
                out += ["--arch", "tiny"]
            i += 2
            continue
        if a == "--input":
            out += ["--input", env["inputs"].get(nxt, nxt)]
            i += 2
            continue
        if a in ("--save-session", "--resume"):  # snapshots go to the scratch folder too
            out += [a, os.path.join(env["scratch"], nxt)]
            i += 2
            continue
        if a == "--out":
            out += ["--out", os.path.join(env["scratch"], nxt.strip("/") or "out")]
            i += 2
            continue
        if sub in ("convert", "inspect") and i >= 2 and not a.startswith("-"):
            out.append(env["files"].get(a, os.path.join(env["scratch"], a)))
            i += 1
            continue
        if sub == "render" and i == 2:
            out.append(os.path.join(env["scratch"], a.strip("/")))
            i += 1
            continue
        out.append(a)
        i += 1
    if sub == "run":
        if "--first-k" not in out:
            out += ["--first-k", "6"]
        out += ["--size", "140"] + ([] if "--overwrite" in out else ["--overwrite"])
    if sub == "bench":
        out += ["--model", env["model"], "--arch", "tiny", "--frames", "10", "--warmup", "1",
                "--height", "56", "--width", "70", "--scale-frames", "4", "--window", "6"]
    if sub == "render":
        out += ["--frames", "3", "--size", "160x90"]
    return [env["binary"]] + out[1:]


def main():
    binary, readme, fixtures = sys.argv[1:4]
    fixtures = os.environ.get("LINGBOT_FIXTURES") or fixtures
    if not os.path.isdir(os.path.join(fixtures, "tiny", "frames")):
        print("no fixtures at %s: skipped" % fixtures)
        return 77
    scratch = tempfile.mkdtemp(prefix="lingbot_walkthrough_")
    try:
        frames = os.path.join(fixtures, "tiny", "frames")
        # A video to stand for clip.mp4: the demo renders one (PNG frames without FFmpeg).
        demo = os.path.join(scratch, "demo")
        subprocess.run([binary, "demo", "--quiet", "--frames", "8", "--out", demo],
                       check=True, capture_output=True)
        clip = os.path.join(demo, "fly.mp4")
        env = {
            "binary": binary,
            "scratch": scratch,
            "model": "synthetic:1",
            "inputs": {"clip.mp4": clip if os.path.exists(clip) else frames, "frames/": frames,
                       "photos/": frames, "more_frames/": frames,
                       "../shared/fixtures/tiny/frames": frames,
                       "photo.jpg": os.path.join(frames, sorted(os.listdir(frames))[0])},
            "files": {"checkpoint.pt": os.path.join(scratch, "synthetic.pt")},
        }
        # convert's input in the README is a downloaded checkpoint: a synthetic one stands in.
        subprocess.run([binary, "convert", "synthetic:1", "--arch", "tiny",
                        env["files"]["checkpoint.pt"]], capture_output=True)
        if not os.path.exists(env["files"]["checkpoint.pt"]):
            subprocess.run([binary, "convert", "synthetic:1", env["files"]["checkpoint.pt"]],
                           check=True, capture_output=True)
        passed = failed = 0
        for line in readme_commands(readme):
            argv = shlex.split(line)
            cmd = adapt(argv, env)
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                               stdin=subprocess.DEVNULL)
            output = (r.stdout + r.stderr).strip()
            problems = []
            if r.returncode < 0:
                problems.append("killed by signal %d" % -r.returncode)
            if TRACEBACK.search(output):
                problems.append("a crash or traceback")
            if not output:
                problems.append("no output")
            if INTERNAL.search(output):
                problems.append("a message naming an internal tensor")
            if r.returncode not in (0, 130):
                lines = [l for l in output.splitlines() if l.strip()]
                if not lines or not lines[-1].startswith("lingbot-map: error: "):
                    problems.append("exit %d without a clean error line" % r.returncode)
            if problems:
                failed += 1
                print("FAIL %s\n  ran: %s\n  %s\n%s" % (line, shlex.join(cmd), ", ".join(problems),
                                                       output[-2000:]))
            else:
                passed += 1
                last = output.splitlines()[-1] if output else ""
                print("ok   %s\n     -> %s" % (line, last[:160]))
        print("%d passed, %d failed" % (passed, failed))
        return 1 if failed or passed == 0 else 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
