"""The web pages in headless Chromium (Debian's ``chromium``, driven by Playwright; no
browser is downloaded): the board opens, a run opens, its canvas draws the stage and the
cars, play advances the replay, the split delta shows, and the console has no errors."""

from __future__ import annotations

import os

import pytest

import tracks
from tests.server.support import Server, add_token, submit, wait_verdict

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("browser_extra")]
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]

COVERED = """() => {
  const c = document.getElementById('track');
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
  return n;
}"""


@pytest.fixture(scope="module")
def board(tmp_path_factory, honest):
    db = str(tmp_path_factory.mktemp("web") / "board.sqlite3")
    tok = add_token(db, "ada")
    s = Server(db, "--workers", "1").start()
    try:
        ids = [
            submit(s.url, tok, d, p).json()["id"]
            for d, p in zip(honest, ("ada", "bob"), strict=True)
        ]
        for i in ids:
            assert wait_verdict(s.url, i)["status"] == "accepted"
        yield s
    finally:
        s.stop()


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="apt-get install chromium")
def test_board_and_run_page_draw_and_play(board):
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(board.url + "/")
            assert page.locator("a.card").count() == len(tracks.list_stages())
            assert "ada" in page.locator("a.card[href='/stages/opener']").inner_text()
            page.click("a.card[href='/stages/opener']")
            page.wait_for_selector("table.board")
            rows = page.locator("table.board tbody tr")
            assert rows.count() == 2
            assert "bob" in rows.nth(1).inner_text()
            rows.nth(1).locator("a.run").click()  # the slower run: the record rides as a ghost
            page.wait_for_selector("#track[data-ready='1']", timeout=60_000)
            assert page.evaluate(COVERED) > 5_000  # the stage is drawn
            assert page.locator("#legend li").count() == 2
            assert int(page.get_attribute("#track", "data-frame")) == 0
            page.click("#play")
            page.wait_for_function(
                "() => Number(document.getElementById('track').dataset.frame) > 10",
                timeout=30_000,
            )
            assert float(page.text_content("#time")) > 0.4
            assert float(page.text_content("#speed")) > 0
            page.click("#play")  # pause, then scrub to the end: slower than the record
            page.eval_on_selector(
                "#scrub",
                "s => { s.value = s.max; s.dispatchEvent(new Event('input')); }",
            )
            assert page.text_content("#delta").startswith("+")
            shot = page.locator("#track").screenshot()
            assert len(shot) > 1000
        finally:
            browser.close()
    assert errors == []
