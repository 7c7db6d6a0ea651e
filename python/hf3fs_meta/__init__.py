"""hf3fs_meta: the C++ SDK of vLLM's HF3FS metadata service, for Python.

Three clients over the same C++ ``Client`` (every guarantee is the SDK's):

- ``Hf3fsGlobalMetadataClient``: a drop-in for vLLM's client of the same name. Same methods,
  arguments and return shapes; a worker rank it initialized is initialized again when the server
  restarts; an allocate is never repeated after an ambiguous failure unless the server deduplicates.
- ``Client``: the same calls with Pythonic names and results.
- ``LocalClient``: the ``Client`` calls in this process, over an in-memory state; no server.

Failures raise ``MetadataError`` (a RuntimeError); arguments refused before anything is sent raise
TypeError, or ``InvalidArgumentError`` (a MetadataError and a ValueError). Every network call releases
the GIL; one client is safe to share between threads.
"""

from ._errors import InvalidArgumentError, MetadataError
from ._core import Client, Hf3fsGlobalMetadataClient, LocalClient, __version__

__all__ = ["Client", "Hf3fsGlobalMetadataClient", "InvalidArgumentError", "LocalClient", "MetadataError"]
