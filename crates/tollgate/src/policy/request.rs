//! What policies see of a request: framework-free attributes, filled in by a frontend (the
//! tower layer from an HTTP request, the check API from JSON).

use std::borrow::Cow;
use std::net::IpAddr;

/// Request headers, looked up by lower-case name.
pub trait HeaderSource {
    /// The first value of the header.
    fn first(&self, name: &str) -> Option<&str>;

    /// Every value of the header joined with `,` (forwarding headers may come as several lines).
    fn joined(&self, name: &str) -> Option<Cow<'_, str>>;
}

/// A request without headers.
#[derive(Debug)]
pub struct NoHeaders;

impl HeaderSource for NoHeaders {
    fn first(&self, _name: &str) -> Option<&str> {
        None
    }

    fn joined(&self, _name: &str) -> Option<Cow<'_, str>> {
        None
    }
}

/// Headers as (name, value) pairs.
impl HeaderSource for Vec<(String, String)> {
    fn first(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn joined(&self, name: &str) -> Option<Cow<'_, str>> {
        let values: Vec<&str> = self
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect();
        match values.as_slice() {
            [] => None,
            [one] => Some(Cow::Borrowed(one)),
            many => Some(Cow::Owned(many.join(","))),
        }
    }
}

/// Who is asking, as the app's auth layer knows it. Put one in the request's extensions and the
/// tower layer uses it for `user`, `tenant`, `api_key` keys and plan tiers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// The user id.
    pub user: Option<String>,
    /// The tenant or organisation.
    pub tenant: Option<String>,
    /// The plan (`free`, `pro`, ...), for tiers.
    pub plan: Option<String>,
    /// The API key.
    pub api_key: Option<String>,
}

/// A request's attributes.
pub struct Request<'a> {
    /// The method, such as `GET`.
    pub method: &'a str,
    /// The host, without or with a port.
    pub host: Option<&'a str>,
    /// The path, without the query.
    pub path: &'a str,
    /// The route the app's router matched (`/users/{id}`), if known.
    pub route: Option<&'a str>,
    /// The socket peer (for the check API: the client address as the caller knows it).
    pub peer: Option<IpAddr>,
    /// The headers.
    pub headers: &'a (dyn HeaderSource + Sync),
    /// The user id.
    pub user: Option<&'a str>,
    /// The tenant.
    pub tenant: Option<&'a str>,
    /// The plan.
    pub plan: Option<&'a str>,
    /// The API key.
    pub api_key: Option<&'a str>,
    /// The key the application works out for this request, for policies keyed by
    /// [`KeyPart::Custom`](crate::policy::KeyPart::Custom).
    pub custom_key: Option<&'a str>,
    /// The body size, when known in advance.
    pub content_length: Option<u64>,
    /// Whether the request has a body whose size is not known in advance (chunked), which a
    /// policy that counts body bytes refuses rather than let it pass uncounted.
    pub length_unknown: bool,
    /// The SHA-256 of the request's body, when the frontend read it: an idempotency key is
    /// honoured only with it, so that a key replays only the very same request.
    pub body_digest: Option<[u8; 32]>,
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("method", &self.method)
            .field("host", &self.host)
            .field("path", &self.path)
            .field("route", &self.route)
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

impl<'a> Request<'a> {
    /// A request with just a method and a path; set the other fields as needed.
    pub fn new(method: &'a str, path: &'a str) -> Self {
        Self {
            method,
            host: None,
            path,
            route: None,
            peer: None,
            headers: &NoHeaders,
            user: None,
            tenant: None,
            plan: None,
            api_key: None,
            custom_key: None,
            content_length: None,
            length_unknown: false,
            body_digest: None,
        }
    }

    /// Takes user, tenant, plan and API key from an [`Identity`].
    pub fn with_identity(mut self, identity: &'a Identity) -> Self {
        self.user = identity.user.as_deref();
        self.tenant = identity.tenant.as_deref();
        self.plan = identity.plan.as_deref();
        self.api_key = identity.api_key.as_deref();
        self
    }
}
