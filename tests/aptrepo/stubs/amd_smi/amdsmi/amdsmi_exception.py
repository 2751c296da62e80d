"""Test stub of amdsmi_exception: the exception classes of ROCm's amdsmi with the same names,
bases, attributes (err_code, get_error_code()) and messages, so callers' error handling runs as
on a node. StubNotRecorded is the stub's own: a call it has no recording for."""

from enum import IntEnum

from . import amdsmi_wrapper as w


class AmdSmiRetCode(IntEnum):
    SUCCESS = w.AMDSMI_STATUS_SUCCESS
    ERR_INVAL = w.AMDSMI_STATUS_INVAL
    ERR_NOT_SUPPORTED = w.AMDSMI_STATUS_NOT_SUPPORTED
    FILE_ERROR = w.AMDSMI_STATUS_FILE_ERROR
    ERR_NO_PERM = w.AMDSMI_STATUS_NO_PERM
    INIT_ERROR = w.AMDSMI_STATUS_INIT_ERROR
    ERR_NOT_FOUND = w.AMDSMI_STATUS_NOT_FOUND
    NOT_INIT = w.AMDSMI_STATUS_NOT_INIT
    DRIVER_NOT_LOADED = w.AMDSMI_STATUS_DRIVER_NOT_LOADED
    UNKNOWN_ERROR = w.AMDSMI_STATUS_UNKNOWN_ERROR


_ERR_INFO = {
    AmdSmiRetCode.ERR_INVAL: "AMDSMI_STATUS_INVAL - Invalid parameters",
    AmdSmiRetCode.ERR_NOT_SUPPORTED: "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported",
    AmdSmiRetCode.FILE_ERROR: "AMDSMI_STATUS_FILE_ERROR - Error opening file",
    AmdSmiRetCode.ERR_NO_PERM: "AMDSMI_STATUS_NO_PERM - Permission Denied",
    AmdSmiRetCode.INIT_ERROR: "AMDSMI_STATUS_INIT_ERROR - Initialization error",
    AmdSmiRetCode.ERR_NOT_FOUND: "AMDSMI_STATUS_NOT_FOUND - Device Not found",
    AmdSmiRetCode.NOT_INIT: "AMDSMI_STATUS_NOT_INIT - Device not initialized",
}


class AmdSmiException(Exception):
    """Base smi exception class"""


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code):
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code
        self.err_info = _ERR_INFO.get(
            err_code, "AMDSMI_STATUS_UNKNOWN_ERROR - An unknown error occurred"
        )

    def __str__(self):
        return f"An error occured with code: {self.err_code}({self.err_info})"

    def get_error_code(self):
        return self.err_code

    def get_error_info(self):
        return self.err_info


class AmdSmiParameterException(AmdSmiException):
    def __init__(self, received_value, expected_type, msg=None):
        super().__init__(msg)
        self.actualType = type(received_value)
        self.expectedType = expected_type
        self.err_msg = msg or (
            "Invalid parameter:\n"
            f"Actual type: {self.actualType}\n"
            f"Expected type: {self.expectedType}"
        )

    def __str__(self):
        return self.err_msg


class StubNotRecorded(AmdSmiException):
    """The stub has no recording for this call (it never makes a value up)."""

    def __init__(self, call, detail=""):
        super().__init__(call)
        self.call = call
        self.detail = detail

    def __str__(self):
        extra = f": {self.detail}" if self.detail else ""
        return (
            f"amdsmi test stub (instinct.vllm tests/aptrepo): no recording for {self.call}{extra}"
        )
