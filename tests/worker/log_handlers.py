"""Handlers that write output, for the step-log tests (tests/worker/test_step_logs.py,
tests/cli/test_runs_logs.py, tests/ui/test_step_logs_ui.py): served by in-process workers
with ``handlers=[LOG_HANDLERS]``."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from rara.context import StepContext
from rara.secrets import resolve
from rara.worker.registry import Registry

LOG_HANDLERS = "tests.worker.log_handlers"
registry = Registry()
log = logging.getLogger("tests.chatty")


@registry.handler("test.log.chatty@1")
async def chatty(ctx: StepContext) -> Any:
    """``lines`` lines of each kind, yielding to the other steps between them."""
    for i in range(ctx.input.get("lines", 20)):
        print(f"{ctx.step_key} out {i}")
        sys.stderr.write(f"{ctx.step_key} err {i}\n")
        log.warning("%s logged %s", ctx.step_key, i)
        await asyncio.sleep(0.001)
    return None


@registry.handler("test.log.chatty_sync@1")
def chatty_sync(ctx: StepContext) -> Any:
    """The same from a handler thread, written in pieces (a line is whole only at its end)."""
    for i in range(ctx.input.get("lines", 20)):
        sys.stdout.write(f"{ctx.step_key} ")
        time.sleep(0.001)
        sys.stdout.write(f"out {i}\n")
        log.warning("%s logged %s", ctx.step_key, i)
    return None


@registry.handler("test.log.flood@1")
def flood(ctx: StepContext) -> Any:
    """``lines`` lines of 100 bytes each (99 characters and a newline), numbered."""
    for i in range(ctx.input["lines"]):
        print(f"{i:08d}".ljust(99, "x"))
    return None


@registry.handler("test.log.secret@1")
def secret(ctx: StepContext) -> Any:
    """Prints a secret it resolved (in two pieces), and credential-looking text."""
    value = resolve("testlog", "token")
    sys.stdout.write(f"the token is {value[:5]}")
    sys.stdout.write(f"{value[5:]} (do not tell)\n")
    print("connecting with password=sw0rdfish-42")
    log.warning("key AKIAABCDEFGHIJKLMNOP in use")
    print("NUL here:\x00.")
    return None


@registry.handler("test.log.leaky@1")
def leaky(ctx: StepContext) -> Any:
    """Prints the value of a secret its step names, read from the environment by hand."""
    print(f"leaking {os.environ['RARA_SECRET_TESTLOG_TOKEN']}!")
    return None


@registry.handler("test.log.until@1")
async def until(ctx: StepContext) -> Any:
    """Prints a line, then waits (cooperatively) for the file ``release`` to exist."""
    print(f"{ctx.step_key} started")
    if "say" in ctx.input:
        print(ctx.input["say"])
    release = Path(ctx.input["release"])
    while not release.exists():  # noqa: ASYNC240 (a stat of a test's file, 50 times a second)
        if ctx.cancelled():
            return None
        await asyncio.sleep(0.02)
    print(f"{ctx.step_key} done")
    if ctx.input.get("fail"):
        raise ValueError("boom after the release")
    return None
