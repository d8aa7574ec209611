"""Serving a committed result: the file a file output names (only inside RESULTS_DIR), or the JSON output."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from starlette.responses import JSONResponse, Response, StreamingResponse

from api.problems import RESULT_GONE

log = logging.getLogger(__name__)

CHUNK_BYTES = 64 * 1024
# The media types a file result may be served as; anything else goes out as octet-stream.
FILE_MEDIA_TYPES = ("text/csv", "application/octet-stream")


def respond(output: dict[str, Any] | None, results_dir: Path) -> Response:
    """The response for a committed attempt's output. An output naming a `path` is a file under
    `results_dir`; a path that leads outside it, or a file that is gone, answers 404 `result-gone`."""
    output = output or {}
    path = output.get("path")
    if not isinstance(path, str):
        return JSONResponse(output)
    media_type = output.get("media_type")
    return _stream(_open_within(results_dir, path), media_type if media_type in FILE_MEDIA_TYPES else None)


def _open_within(results_dir: Path, relative: str) -> BinaryIO:
    root = results_dir.resolve()
    try:
        target = (root / relative).resolve()
    except (OSError, ValueError):
        target = root
    if target == root or not target.is_relative_to(root):
        log.error("a committed result names no file inside RESULTS_DIR: %r", relative)
        raise RESULT_GONE.error("The result file is not available.")
    try:
        return target.open("rb")
    except (OSError, ValueError) as exc:
        log.error("a committed result file cannot be read: %s", exc)
        raise RESULT_GONE.error("The result file is not available.") from None


def _stream(file: BinaryIO, media_type: str | None) -> Response:
    size = os.fstat(file.fileno()).st_size
    return StreamingResponse(
        _chunks(file),
        media_type=media_type or "application/octet-stream",
        headers={"Content-Length": str(size)},
    )


def _chunks(file: BinaryIO) -> Iterator[bytes]:
    with file:
        while chunk := file.read(CHUNK_BYTES):
            yield chunk
