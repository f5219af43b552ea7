"""The README's screenshots of every tab: ``python -m tests.web.screenshots`` (the ``[web]`` and
``[webtest]`` extras and Debian's Chromium) starts ``trainplan serve``, opens each tab on an
example in headless Chromium, waits for its figures and writes ``docs/screenshots/<tab>.png``;
``python -m tests.web.screenshots planner search`` re-makes only the tabs named (:data:`SHOTS`)."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.web.conftest import CHROMIUM, CHROMIUM_ARGS, start_server

OUT = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
SHOTS = {
    "planner": ("/planner?model=llama3-70b&dp=2&tp=4&pp=8", "#memory-figure svg"),
    "pipeline": (
        "/pipeline?stages=4&microbatches=8&schedule=interleaved&virtual-stages=2",
        "#timeline svg",
    ),
    "mfu": (
        "/mfu?params=70e9&tokens=4e6&step-seconds=7&peak-tflops=989&chips=512&attention=true"
        "&layers=80&heads=64&head-dim=128&seq-len=4096&causal=true&recompute=selective",
        "#mfu",
    ),
    "ckpt": ("/ckpt?layers=9&every=3&step=12", "#frame svg"),
    "rlhf": ("/rlhf?algorithm=ppo&policy-params=70e9&reward-params=7e9", "#resident"),
    "rlhf-plan": (
        "/rlhf?algorithm=grpo&policy-params=70e9&reward=rule"
        "&plan=algorithm%3Dgrpo%26reward%3Drule%26model%3Dllama3-8b%26gpus%3D8",
        "#plan-step-time",
    ),
    "search": ("/search?model=llama3-70b&gpus=64", ".answer .memory-figure svg"),
    "search-per-stage": (
        "/search?model=llama3-70b&gpus=32&seq-len=8192&per-stage=true",
        ".per-stage .gain",
    ),
    "frontier": ("/frontier?model=llama3-70b&gpus=64", "#chart svg"),
    "api": ("/docs", ".swagger-ui .opblock"),
}
"""Each tab's example and the element that says it is drawn."""
SCROLL = {"rlhf-plan": "#plan"}
"""The shots of a section below the page's top: the element scrolled to the window's top."""


def main(names: list[str]) -> None:
    """Write the screenshots of the tabs ``names`` (every tab of :data:`SHOTS` when empty)."""
    from playwright.sync_api import sync_playwright

    unknown = sorted(set(names) - set(SHOTS))
    if unknown:
        raise SystemExit(f"unknown tab(s) {', '.join(unknown)}; known: {', '.join(SHOTS)}")

    OUT.mkdir(parents=True, exist_ok=True)
    proc, address = start_server()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1360, "height": 1000})
            page.set_default_timeout(90_000)
            for name, (path, ready) in SHOTS.items():
                if names and name not in names:
                    continue
                page.goto(address + path)
                page.locator(ready).first.wait_for()
                if name in SCROLL:
                    page.locator(SCROLL[name]).evaluate("e => e.scrollIntoView()")
                page.wait_for_timeout(800)  # the last figure's swap
                page.screenshot(path=str(OUT / f"{name}.png"))
                print(OUT / f"{name}.png")
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main(sys.argv[1:])
