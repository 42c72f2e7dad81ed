//! gRPC statuses both ways, in one place: the status a refusal is answered with, and the HTTP
//! status class a status from the service counts as for `refund_on`.

use http::HeaderName;
use tollgate::policy::Reason;

/// The field a gRPC status travels in (in trailers, or in the head of a trailers-only
/// answer): a name made once, where a lookup by text would parse it on every answer.
pub(crate) const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");

/// The gRPC status of a refusal for `reason`.
pub(crate) fn of_refusal(reason: Reason) -> &'static str {
    match reason {
        Reason::Unavailable => "14",
        Reason::LengthRequired => "9",
        Reason::BadRequest => "3",
        Reason::Conflict => "10",
        Reason::Misconfigured => "13",
        Reason::DenyListed {
            as_over_limit: false,
        } => "7",
        _ => "8",
    }
}

/// The HTTP status class a gRPC status counts as for `refund_on`: a failure of the server
/// (`UNKNOWN`, `UNIMPLEMENTED`, `INTERNAL`, `UNAVAILABLE`, `DATA_LOSS`) is a 5xx; what the
/// client causes or asked for (`CANCELLED`, `DEADLINE_EXCEEDED` from its own `grpc-timeout`,
/// `INVALID_ARGUMENT`, `RESOURCE_EXHAUSTED`, ...) is a 4xx and never refunds a `5xx` policy;
/// `OK` is 200.
pub(crate) fn http_class(status: &str) -> u16 {
    match status.trim() {
        "0" => 200,
        "2" => 500,
        "12" => 501,
        "13" => 500,
        "14" => 503,
        "15" => 500,
        _ => 400,
    }
}
