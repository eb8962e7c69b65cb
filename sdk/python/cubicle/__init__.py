"""cubicle: Linux computers (Xfce desktops and headless sandboxes) for AI
agents, driven through cubicled's REST API. Standard library only.

    from cubicle import Computer
    with Computer.create(kind="desktop") as c:
        c.left_click(100, 200)
        c.type("hello\\n")
        png = c.screenshot()

Configuration: $CUBICLE_URL and $CUBICLE_API_KEY, or Client(url, api_key)
passed as client= to Computer.create/get/list.
"""

from .actions import ProcessResult
from .client import Client, default_client
from .computer import Computer, ComputerUseAnswer
from .errors import (BadGateway, BadRequest, ComputerFailed, Conflict, ConnectionFailed,
                     CubicleError, Forbidden, InsufficientStorage, InternalError,
                     InvalidParameter, NotFound, RateLimited, RequestTimeout, TemplateFailed,
                     TooLarge, Timeout, Unauthorized, Unavailable)
from .templates import Templates

__version__ = "0.1.0"

__all__ = ["Client", "Computer", "ComputerUseAnswer", "ProcessResult", "Templates",
           "default_client", "CubicleError", "BadGateway", "BadRequest", "ComputerFailed",
           "Conflict", "ConnectionFailed", "Forbidden", "InsufficientStorage", "InternalError",
           "InvalidParameter", "NotFound", "RateLimited", "RequestTimeout", "TemplateFailed",
           "TooLarge", "Timeout", "Unauthorized", "Unavailable"]
