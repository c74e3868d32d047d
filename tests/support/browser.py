#!/usr/bin/python3
"""Drives headless Chromium through the DevTools protocol for the dashboard
tests: runs the steps of a JSON file and prints what they read as JSON.

Steps: {"navigate": URL}, {"wait": JS, "timeout_ms": N} (until truthy),
{"eval": JS, "name": KEY} (the value goes to the output under KEY),
{"screenshot": PATH} (the whole page, PNG).

usage: browser.py STEPS.json PROFILE_DIR
"""
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import websocket  # python3-websocket


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Page:
    def __init__(self, ws_url):
        self.ws = websocket.create_connection(ws_url, timeout=30)
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")


def until(page, expression, timeout_ms):
    """Polls `expression` until it is truthy; one that throws (the page not
    there yet) is polled again, and its last error is reported on timeout."""
    deadline = time.time() + timeout_ms / 1000
    last_error = None
    while time.time() < deadline:
        try:
            if page.evaluate(expression):
                return
        except RuntimeError as error:
            last_error = error
        time.sleep(0.1)
    raise RuntimeError(f"timed out waiting for: {expression}" + (f" (last error: {last_error})" if last_error else ""))


def main():
    steps = json.load(open(sys.argv[1]))
    profile = sys.argv[2]
    port = free_port()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    browser = subprocess.Popen(
        [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
         "--no-first-run", f"--user-data-dir={profile}", f"--remote-debugging-port={port}", "--window-size=1400,1100",
         "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = {}
    page = None
    try:
        for _ in range(200):
            try:
                targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=1))
                pages = [t for t in targets if t.get("type") == "page"]
                if pages:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        else:
            raise RuntimeError("chromium did not open its DevTools port")
        page = Page(pages[0]["webSocketDebuggerUrl"])
        page.call("Page.enable")
        page.call("Emulation.setDeviceMetricsOverride", width=1400, height=1100, deviceScaleFactor=1, mobile=False)
        for step in steps:
            if not isinstance(step, dict):
                raise RuntimeError(f"a step is an object, not {step!r}")
            if "navigate" in step:
                page.call("Page.navigate", url=step["navigate"])
                until(page, f"location.href === {json.dumps(step['navigate'])} && document.readyState === 'complete'", 10000)
            elif "wait" in step:
                until(page, step["wait"], step.get("timeout_ms", 10000))
            elif "eval" in step:
                value = page.evaluate(step["eval"])
                if "name" in step:
                    out[step["name"]] = value
            elif "screenshot" in step:
                height = page.evaluate("document.documentElement.scrollHeight")
                page.call("Emulation.setDeviceMetricsOverride", width=1400, height=max(1100, height),
                          deviceScaleFactor=1, mobile=False)
                shot = page.call("Page.captureScreenshot", format="png")
                os.makedirs(os.path.dirname(step["screenshot"]) or ".", exist_ok=True)
                with open(step["screenshot"], "wb") as f:
                    f.write(base64.b64decode(shot["data"]))
                page.call("Emulation.setDeviceMetricsOverride", width=1400, height=1100, deviceScaleFactor=1, mobile=False)
            else:
                raise RuntimeError(f"unknown step {step!r}")
        print(json.dumps(out))
    except Exception:
        try:
            print("page text at the failure:\n" + str(page.evaluate("document.body.innerText")), file=sys.stderr)
        except Exception:
            pass
        raise
    finally:
        browser.terminate()
        try:
            browser.wait(10)
        except subprocess.TimeoutExpired:
            browser.kill()


if __name__ == "__main__":
    main()
