"""A real Jupyter server started as ``make lab`` starts it, and a small client of its REST and
kernel websocket APIs - what JupyterLab's front end does when a user opens a notebook and runs
its cells (the kernel starts in the notebook's own folder)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import re
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from PIL import Image
from playwright.sync_api import FloatRect, sync_playwright
from tornado.websocket import websocket_connect

from harness.environment.ports import free_ports
from harness.environment.process import terminate
from harness.readiness import NotReady, wait_for

TOKEN = "chaoslab-test"


@dataclass
class JupyterServer:
    base: str  # http://127.0.0.1:PORT
    process: subprocess.Popen[bytes]
    log: Path

    def url(self, path: str, **query: str) -> str:
        params = "&".join(f"{k}={v}" for k, v in {**query, "token": TOKEN}.items())
        return f"{self.base}/{path.lstrip('/')}?{params}"

    def call(self, method: str, path: str, body: Any = None, **query: str) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url(path, **query), data=data, method=method)
        request.add_header("Content-Type", "application/json")
        # A token in the header also exempts the request from the XSRF check.
        request.add_header("Authorization", f"token {TOKEN}")
        with urllib.request.urlopen(request, timeout=60) as response:
            raw = response.read()
        return json.loads(raw) if raw else None

    def descendants(self) -> list[psutil.Process]:
        """The server's children (kernels) and theirs."""
        try:
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []


def lab_argv(notebook_dir: Path, port: int) -> list[str]:
    """``make lab``'s command (on a port and token of the test's choosing)."""
    argv = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip", "127.0.0.1",
            "--port", str(port), f"--IdentityProvider.token={TOKEN}",
            "--notebook-dir", str(notebook_dir)]  # fmt: skip
    if os.geteuid() == 0:  # CI containers run as root, which JupyterLab refuses by default
        argv.append("--allow-root")
    return argv


@contextmanager
def jupyter_server(notebook_dir: Path, home: Path) -> Iterator[JupyterServer]:
    """JupyterLab serving ``notebook_dir``; its runtime, config and data folders under
    ``home``, so nothing is written to the user's own. Stopped (server and kernels) on exit."""
    (port,) = free_ports(1)
    log = home / "jupyter.log"
    folders = {
        "JUPYTER_RUNTIME_DIR": home / "runtime",
        "JUPYTER_CONFIG_DIR": home / "config",
        "JUPYTER_DATA_DIR": home / "data",
        "JUPYTERLAB_WORKSPACES_DIR": home / "workspaces",
    }
    env = {**os.environ, **{k: str(v) for k, v in folders.items()}}
    with log.open("wb") as sink:
        process = subprocess.Popen(
            lab_argv(notebook_dir, port), stdout=sink, stderr=subprocess.STDOUT, env=env
        )
    server = JupyterServer(f"http://127.0.0.1:{port}", process, log)
    try:

        def answers() -> None:
            if process.poll() is not None:
                raise AssertionError(f"JupyterLab exited: {log.read_text()[-2000:]}")
            try:
                server.call("GET", "api/status")
            except OSError as exc:
                raise NotReady(str(exc)) from exc

        wait_for(answers, what="JupyterLab", timeout=120)
        yield server
    finally:
        kernels = server.descendants()
        with suppress(OSError):
            server.call("POST", "api/shutdown")  # the server stops its kernels first
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout=60)
        # Bounded either way: whatever still runs is terminated, then killed.
        left = [p for p in [*kernels, *server.descendants()] if p.is_running()]
        if process.poll() is None:
            left.append(psutil.Process(process.pid))
        terminate(left, grace=10, what="stopping JupyterLab")
        process.wait(timeout=10)


def injected_parameters(values: dict[str, Any]) -> str:
    """A cell that overrides the notebook's parameters, as papermill injects one."""
    return "\n".join(f"{name} = {value!r}" for name, value in values.items())


@dataclass
class CellOutput:
    text: str = ""  # stdout, stderr and text/plain results, in order
    images: list[bytes] = field(default_factory=list)  # image/png outputs, decoded
    error: str = ""  # ename: evalue, when the cell raised


async def _execute(ws_url: str, cells: list[str], timeout: float) -> list[CellOutput]:
    session = uuid.uuid4().hex
    conn = await websocket_connect(ws_url)
    outputs = []
    try:
        for code in cells:
            msg_id = uuid.uuid4().hex
            await conn.write_message(json.dumps({
                "header": {"msg_id": msg_id, "username": "test", "session": session,
                           "msg_type": "execute_request", "version": "5.3"},
                "parent_header": {}, "metadata": {}, "buffers": [], "channel": "shell",
                "content": {"code": code, "silent": False, "store_history": True,
                            "user_expressions": {}, "allow_stdin": False,
                            "stop_on_error": True},
            }))  # fmt: skip
            out = CellOutput()
            replied = idle = False
            while not (replied and idle):
                raw = await asyncio.wait_for(conn.read_message(), timeout=timeout)
                if raw is None:
                    raise ConnectionError("the kernel's websocket closed")
                msg = json.loads(raw)
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind, content = msg["msg_type"], msg["content"]
                if kind == "stream":
                    out.text += content["text"]
                elif kind in ("execute_result", "display_data"):
                    data = content["data"]
                    out.text += data.get("text/plain", "") + "\n"
                    if "image/png" in data:
                        out.images.append(base64.b64decode(data["image/png"]))
                elif kind == "error":
                    out.error = f"{content['ename']}: {content['evalue']}"
                elif kind == "execute_reply":
                    replied = True
                elif kind == "status" and content["execution_state"] == "idle":
                    idle = True
            outputs.append(out)
            if out.error:
                break
    finally:
        conn.close()
    return outputs


@dataclass
class Execution:
    notebook: dict[str, Any]  # as the contents API gave it
    outputs: list[CellOutput]  # each executed code cell's, up to the first that raised
    kernel: list[psutil.Process]  # the kernel's processes while it ran

    @property
    def text(self) -> str:
        return "\n".join(o.text for o in self.outputs)


def run_notebook_cells(
    server: JupyterServer, path: str, parameters: dict[str, Any], timeout: float = 600
) -> Execution:
    """Open ``path`` (relative to the server's root) as JupyterLab does - a session whose kernel
    starts in the notebook's folder - and run its code cells, the parameters overridden right
    after the ``parameters`` cell; then close the session (which stops the kernel)."""
    notebook = server.call("GET", f"api/contents/{path}", content="1")
    session = server.call(
        "POST",
        "api/sessions",
        {"path": path, "type": "notebook", "name": "", "kernel": {"name": "python3"}},
    )
    kernel = session["kernel"]["id"]
    cells: list[str] = []
    for cell in notebook["content"]["cells"]:
        if cell["cell_type"] != "code":
            continue
        cells.append(cell["source"])
        if "parameters" in cell["metadata"].get("tags", []):
            cells.append(injected_parameters(parameters))
    ws = re.sub(r"^http", "ws", server.url(f"api/kernels/{kernel}/channels"))
    try:
        outputs = asyncio.run(_execute(ws, cells, timeout))
        kernel_processes = server.descendants()
    finally:
        server.call("DELETE", f"api/sessions/{session['id']}")
    return Execution(notebook, outputs, kernel_processes)


# -- a browser ------------------------------------------------------------------------------------

CHROMIUM = Path("/usr/lib/chromium/chromium")  # Debian's binary (its /usr/bin wrapper warns)
# As root, without a sandbox; and no background connections: this machine's network is closed
# and Chromium would otherwise try (and fail) many at every start.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]  # fmt: skip


def quiet_lab_settings(config_dir: Path) -> None:
    """JupyterLab user settings for a browser test: no autosave (the opened notebook must stay
    as it is), no news popup over the page."""
    settings = config_dir / "lab" / "user-settings" / "@jupyterlab"
    for plugin, values in (
        ("docmanager-extension/plugin", {"autosave": False}),
        ("apputils-extension/notification", {"fetchNews": "false"}),
    ):
        path = settings / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def first_output_image(url: str, home: Path, timeout_s: float = 120) -> bytes:
    """Open ``url`` (a notebook in JupyterLab) in headless Chromium, wait until the first image
    among the cells' outputs is shown, and return a PNG screenshot of it as displayed."""
    timeout_ms = timeout_s * 1000
    # Chromium writes crash reports and a dconf cache to $HOME's folders otherwise.
    env: dict[str, str | float | bool] = {
        **os.environ,
        "XDG_CONFIG_HOME": str(home / "xdg"),
        "XDG_CACHE_HOME": str(home / "xdg"),
    }
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True, env=env
        )
        try:
            page = browser.new_page(viewport={"width": 2000, "height": 1200}, device_scale_factor=1)
            page.goto(url, wait_until="domcontentloaded", timeout=timeout_ms)
            image = page.locator(".jp-OutputArea-output img").first
            image.wait_for(state="visible", timeout=timeout_ms)
            page.wait_for_function(
                "el => el.complete && el.naturalWidth > 0",
                arg=image.element_handle(),
                timeout=timeout_ms,
            )
            image.scroll_into_view_if_needed()
            x, y, w, h = image.evaluate(
                "el => {const r = el.getBoundingClientRect();"
                " return [r.x, r.y, el.clientWidth, el.clientHeight]}"
            )
            # Clipped to whole pixels: an element screenshot at y=230.125 is one row taller.
            clip: FloatRect = {"x": round(x), "y": round(y), "width": w, "height": h}
            return page.screenshot(clip=clip, animations="disabled")
        finally:
            browser.close()


def mean_difference(shown: bytes, reference: Path) -> float:
    """Mean absolute difference per pixel and channel (0-255) between an image as a browser
    showed it (resized back, if the page scaled it) and the PNG it came from."""

    def rgb(image: Image.Image) -> Image.Image:
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")

    ref = rgb(Image.open(reference))
    shot = rgb(Image.open(io.BytesIO(shown)))
    if shot.size != ref.size:
        shot = shot.resize(ref.size, Image.Resampling.LANCZOS)
    return float(np.abs(np.asarray(shot, float) - np.asarray(ref, float)).mean())
