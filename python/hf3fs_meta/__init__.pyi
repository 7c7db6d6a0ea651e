from ._core import Client as Client, Hf3fsGlobalMetadataClient as Hf3fsGlobalMetadataClient, LocalClient as LocalClient
from ._core import __version__ as __version__
from ._errors import InvalidArgumentError as InvalidArgumentError, MetadataError as MetadataError

__all__ = ["Client", "Hf3fsGlobalMetadataClient", "InvalidArgumentError", "LocalClient", "MetadataError"]
