"""Serving a committed result: the file a file output names (only inside RESULTS_DIR), or the JSON output."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from starlette.responses import JSONResponse, Response, StreamingResponse

from outbox_bridge.api.problems import RESULT_GONE
from outbox_bridge.handlers.base import file_of

log = logging.getLogger(__name__)

CHUNK_BYTES = 64 * 1024
OCTET_STREAM = "application/octet-stream"
# What a download name may hold as it is (a job id and a kind always do); anything else becomes `_`.
_SAFE = re.compile(r"[^A-Za-z0-9._-]")
# The media types a file result may be served as, with the extension of its download name; anything else
# goes out as octet-stream.
FILE_EXTENSIONS = {"text/csv": ".csv", "application/octet-stream": ".bin"}
FILE_MEDIA_TYPES = tuple(FILE_EXTENSIONS)


def respond(output: dict[str, Any] | None, results_dir: Path, download_name: str) -> Response:
    """The response for a committed attempt's output: its JSON, whatever its keys (`null` for a kind that
    returned None); or, for an output naming a file (`handlers.base.file_of`, made by
    `JobContext.result_file`), the file under `results_dir`, sent as an attachment named `download_name`
    plus its type's extension; a path that leads outside it, or a file that is gone, answers 404
    `result-gone`."""
    named = file_of(output)
    if named is None:
        return JSONResponse(output)
    path, declared = named
    media_type = declared if declared in FILE_EXTENSIONS else OCTET_STREAM
    filename = f"{download_name}{FILE_EXTENSIONS[media_type]}"
    return _stream(_open_within(results_dir, path), media_type, filename)


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


def _stream(file: BinaryIO, media_type: str, filename: str) -> Response:
    size = os.fstat(file.fileno()).st_size
    disposition = f'attachment; filename="{_SAFE.sub("_", filename)}"'
    return StreamingResponse(
        _chunks(file),
        media_type=media_type,
        headers={"Content-Length": str(size), "Content-Disposition": disposition},
    )


def _chunks(file: BinaryIO) -> Iterator[bytes]:
    with file:
        while chunk := file.read(CHUNK_BYTES):
            yield chunk
