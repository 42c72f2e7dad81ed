//! Refusals as HTTP: the status and the `application/problem+json` body (RFC 9457) of a
//! [`Refusal`], for every frontend that answers in HTTP (the check API, the tower layer, the
//! proxy).

use crate::refusal::{Reason, Refusal};

/// The problem types of refusals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemKind {
    /// A quota is used up (429).
    QuotaExceeded,
    /// The client is in a penalty box or on the deny list (429).
    AbnormalUsage,
    /// The limiter cannot decide (its store is down) and fails closed (503).
    TemporaryReducedCapacity,
    /// The client is on the deny list (403).
    Forbidden,
    /// A policy counts body bytes and the request did not say how many (411).
    LengthRequired,
    /// The limiter is misconfigured for this request (500).
    ServerError,
    /// The request cannot be decided as sent (400).
    BadRequest,
    /// The request repeats one whose answer cannot be given (409).
    Conflict,
}

impl ProblemKind {
    /// The problem type of a refusal for `reason`.
    pub fn of(reason: Reason) -> Self {
        match reason {
            Reason::OverLimit => ProblemKind::QuotaExceeded,
            Reason::Blocked => ProblemKind::AbnormalUsage,
            Reason::DenyListed {
                as_over_limit: false,
            } => ProblemKind::Forbidden,
            Reason::DenyListed {
                as_over_limit: true,
            } => ProblemKind::AbnormalUsage,
            Reason::Unavailable => ProblemKind::TemporaryReducedCapacity,
            Reason::LengthRequired => ProblemKind::LengthRequired,
            Reason::Misconfigured => ProblemKind::ServerError,
            Reason::BadRequest => ProblemKind::BadRequest,
            Reason::Conflict => ProblemKind::Conflict,
        }
    }

    /// The problem type URI.
    pub fn type_uri(self) -> &'static str {
        match self {
            ProblemKind::QuotaExceeded => {
                "https://iana.org/assignments/http-problem-types#quota-exceeded"
            }
            ProblemKind::AbnormalUsage => {
                "https://iana.org/assignments/http-problem-types#abnormal-usage-detected"
            }
            ProblemKind::TemporaryReducedCapacity => {
                "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
            }
            ProblemKind::Forbidden
            | ProblemKind::LengthRequired
            | ProblemKind::ServerError
            | ProblemKind::BadRequest
            | ProblemKind::Conflict => "about:blank",
        }
    }

    /// The usual status.
    pub fn status(self) -> u16 {
        match self {
            ProblemKind::QuotaExceeded | ProblemKind::AbnormalUsage => 429,
            ProblemKind::TemporaryReducedCapacity => 503,
            ProblemKind::Forbidden => 403,
            ProblemKind::LengthRequired => 411,
            ProblemKind::ServerError => 500,
            ProblemKind::BadRequest => 400,
            ProblemKind::Conflict => 409,
        }
    }

    /// A short title.
    pub fn title(self, status: u16) -> &'static str {
        match status {
            400 => "Bad Request",
            403 => "Forbidden",
            409 => "Conflict",
            411 => "Length Required",
            500 => "Internal Server Error",
            503 => "Service Unavailable",
            _ => "Too Many Requests",
        }
    }
}

impl Refusal {
    /// The HTTP status that answers it: 429 over a limit or blocked, 503 when the limiter cannot
    /// decide, 403 on the deny list (429 where it is answered as over a limit).
    pub fn status(&self) -> u16 {
        ProblemKind::of(self.reason).status()
    }

    /// Its problem type.
    pub fn kind(&self) -> ProblemKind {
        ProblemKind::of(self.reason)
    }
}

/// The `application/problem+json` body of `refusal`, naming the policies it violated.
pub fn problem_json(refusal: &Refusal, violated_policies: &[&str]) -> String {
    let kind = refusal.kind();
    let status = refusal.status();
    let mut body = serde_json::json!({
        "type": kind.type_uri(),
        "title": kind.title(status),
        "status": status,
        "detail": refusal.detail,
    });
    if !violated_policies.is_empty() {
        body["violated-policies"] = serde_json::json!(violated_policies);
    }
    body.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(reason: Reason, detail: &str) -> Refusal {
        Refusal {
            reason,
            retry_after: None,
            detail: detail.to_owned(),
        }
    }

    #[test]
    fn problems_carry_type_status_and_violated_policies() {
        let body: serde_json::Value = serde_json::from_str(&problem_json(
            &refusal(Reason::OverLimit, "5 per minute"),
            &["login"],
        ))
        .unwrap();
        assert_eq!(
            body["type"],
            "https://iana.org/assignments/http-problem-types#quota-exceeded"
        );
        assert_eq!(body["status"], 429);
        assert_eq!(body["violated-policies"], serde_json::json!(["login"]));
        let unavailable: serde_json::Value = serde_json::from_str(&problem_json(
            &refusal(Reason::Unavailable, "store down"),
            &[],
        ))
        .unwrap();
        assert_eq!(unavailable["title"], "Service Unavailable");
        assert!(unavailable.get("violated-policies").is_none());
    }

    #[test]
    fn the_deny_list_answers_with_its_configured_status() {
        let forbidden = refusal(
            Reason::DenyListed {
                as_over_limit: false,
            },
            "listed",
        );
        assert_eq!(forbidden.status(), 403);
        assert_eq!(forbidden.kind(), ProblemKind::Forbidden);
        let throttled = refusal(
            Reason::DenyListed {
                as_over_limit: true,
            },
            "listed",
        );
        assert_eq!(throttled.status(), 429);
        assert_eq!(throttled.kind(), ProblemKind::AbnormalUsage);
    }
}
