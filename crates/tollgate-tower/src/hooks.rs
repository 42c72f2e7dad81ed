//! What an application adds to the layer: the key it counts requests by, and its own answer to
//! the requests the layer refuses.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};
use tollgate::policy::{Reason, Refusal};

/// Works out the key of a request from its head; `None` counts it by client address.
pub(crate) type KeyFn = Arc<dyn Fn(&http::request::Parts) -> Option<String> + Send + Sync>;

/// Answers a refused request in the application's own way.
pub(crate) type RefusalFn = Arc<dyn Fn(&Refused<'_>) -> Response<Bytes> + Send + Sync>;

/// The application's parts of a layer, shared by every service it makes.
#[derive(Clone, Default)]
pub(crate) struct Hooks {
    pub(crate) key: Option<KeyFn>,
    pub(crate) on_refusal: Option<RefusalFn>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("key", &self.key.is_some())
            .field("on_refusal", &self.on_refusal.is_some())
            .finish()
    }
}

impl Hooks {
    /// `hook` as stored: its body made `Bytes`.
    pub(crate) fn refusal_fn<F, B>(hook: F) -> RefusalFn
    where
        F: Fn(&Refused<'_>) -> Response<B> + Send + Sync + 'static,
        B: Into<Bytes>,
    {
        Arc::new(move |refused| hook(refused).map(Into::into))
    }
}

/// A request the layer answers itself instead of passing it on (over a limit, deny-listed,
/// the store unable to decide, ...), as an `on_refusal` hook sees it.
#[derive(Debug)]
pub struct Refused<'a> {
    pub(crate) refusal: &'a Refusal,
    pub(crate) request: &'a http::request::Parts,
}

impl Refused<'_> {
    /// The status Tollgate answers with by default: 429 over a limit, 403 for the deny list,
    /// 503 when the store cannot decide, ...
    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.refusal.status()).unwrap_or(StatusCode::TOO_MANY_REQUESTS)
    }

    /// Why the request is refused.
    pub fn reason(&self) -> Reason {
        self.refusal.reason
    }

    /// How long until the same request would be admitted, when that is known and ever.
    pub fn retry_after(&self) -> Option<Duration> {
        self.refusal.retry_after
    }

    /// A sentence for humans, such as Tollgate's own answer carries.
    pub fn detail(&self) -> &str {
        &self.refusal.detail
    }

    /// The refusal as the limiter states it.
    pub fn refusal(&self) -> &Refusal {
        self.refusal
    }

    /// The refused request's head: method, URI, headers and extensions (to answer in the
    /// format it accepts, say).
    pub fn request(&self) -> &http::request::Parts {
        self.request
    }
}
