"""What a failed call looks like: gRPC's status names, codes and descriptions, an HTTP client's words for the same
failures, and the line a caller logs; the simulator's writers and the fault library use them alike."""

from __future__ import annotations

from .topology import Topology


# gRPC failures: kind -> (status name, status code, description). `{ip}`/`{port}` are the callee's.
ERRORS = {
    "refused": ("Unavailable", 14,
                'connection error: desc = "transport: Error while dialing: dial tcp {ip}:{port}: connect: connection refused"'),
    "dial": ("Unavailable", 14, 'connection error: desc = "transport: Error while dialing: dial tcp {ip}:{port}: i/o timeout"'),
    "reset": ("Unavailable", 14,
              "upstream connect error or disconnect/reset before headers. reset reason: connection failure"),
    "canceled": ("Canceled", 1, "context canceled"),
    "deadline": ("DeadlineExceeded", 4, "context deadline exceeded"),
    "dns": ("Unavailable", 14,
            'name resolver error: produced zero addresses; dial tcp: lookup {service} on 169.254.25.10:53: no such host'),
    "exception": ("Unknown", 2, "java.lang.reflect.InvocationTargetException: Caught ThrowException: injected error"),
    "internal": ("Internal", 13, "code error: panic: runtime error: invalid memory address or nil pointer dereference"),
    "storage": ("FailedPrecondition", 9,
                "{failure}. StackExchange.Redis.RedisTimeoutException: Timeout performing HGET"),
    "db": ("Unavailable", 14, "Error 9005: Region is unavailable; dial tcp {ip}:4000: connect: connection refused"),
    "lookup": ("Internal", 13, "rpc error: code = Unavailable desc = name resolver error: produced zero addresses; "
                               "lookup failed on 169.254.25.10:53: no such host"),
    "failed": ("Internal", 13, "{failure}"),
}
TRANSIENT = ("Unavailable", 14, "transport is closing")
# The same failures as a Spring service's HTTP client reports them (RestTemplate), where a call is over HTTP.
HTTP_ERRORS = {
    "refused": 'I/O error on request for "http://{service}:{port}": Connection refused (Connection refused)',
    "dial": 'I/O error on request for "http://{service}:{port}": connect timed out',
    "reset": 'I/O error on request for "http://{service}:{port}": Connection reset',
    "canceled": "Request processing failed; nested exception is java.util.concurrent.CancellationException",
    "deadline": 'I/O error on request for "http://{service}:{port}": Read timed out',
    "dns": 'I/O error on request for "http://{service}:{port}": {service}: Name or service not known',
    "exception": '500 Internal Server Error: [{{"status":500,"error":"Internal Server Error","path":"/{service}"}}]',
    "internal": '500 Internal Server Error: [{{"status":500,"error":"Internal Server Error","path":"/{service}"}}]',
    "transient": 'I/O error on request for "http://{service}:{port}": Unexpected end of file from server',
    "failed": '500 Internal Server Error: [{{"status":500,"error":"{failure}","path":"/{service}"}}]',
}
# A key observation's gRPC words as an HTTP client writes the same failure (HTTP_ERRORS), none where it has no such
# words (a status name): a system's truth names what its own lines say.
HTTP_WORDS = {
    ("deadlineexceeded",): ["Read timed out"], ("timeout",): ["timed out"],
    ("Error", "while", "dialing"): ["I/O error on request"], ("unavailable",): [],
    ("failure",): ["Connection reset"], ("no such host",): ["Name or service not known"],
    ("context canceled",): ["CancellationException"],
    ("Rpc", "error", "code", "canceled", "desc", "context canceled"): ["CancellationException"],
    ("rpc", "error"): ["I/O error"], ("Internal",): ["500 Internal Server Error"],
    ("code error",): ["500 Internal Server Error"],
}


def status_text(kind: str, topo: Topology, pod: str) -> tuple[str, int, str]:
    """Status name, code and message of a failed call to `pod` (gRPC's; an HTTP client's message over HTTP)."""
    name, code, desc = TRANSIENT if kind == "transient" else ERRORS[kind]
    comp = topo.component(pod)
    if comp.protocol == "http" and kind in HTTP_ERRORS:
        desc = HTTP_ERRORS[kind]
    return name, code, desc.format(ip=topo.ip_of[pod], port=comp.port, service=comp.name, failure=comp.failure)


def failure_line(kind: str, topo: Topology, pod: str) -> str:
    """What a caller logs when its call to `pod` failed so: the callee's `failure` words, then the error."""
    name, _, desc = status_text(kind, topo, pod)
    comp = topo.component(pod)
    return f"{comp.failure}: {desc}" if comp.protocol == "http" else f"{comp.failure}: rpc error: code = {name} desc = {desc}"
