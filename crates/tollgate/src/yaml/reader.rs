//! Collecting a configuration's errors instead of stopping at the first, whether it was read
//! from a file or built in code.

use std::cell::RefCell;
use std::fmt::Display;
use std::sync::Arc;

use super::{ConfigError, ConfigErrors, Origin};

/// Collects the errors of one configuration text (or of one built in code).
#[derive(Debug)]
pub struct Reader {
    source: Arc<str>,
    errors: RefCell<Vec<ConfigError>>,
}

impl Reader {
    /// A reader for values that did not come from a file (configuration built in code).
    pub fn detached(source: &str) -> Self {
        Self {
            source: source.into(),
            errors: RefCell::new(Vec::new()),
        }
    }

    /// Records a problem at `origin`.
    pub fn error(&self, origin: Origin, message: impl Display) {
        self.errors.borrow_mut().push(ConfigError {
            source: Arc::clone(&self.source),
            origin,
            message: message.to_string(),
        });
    }

    /// Every recorded problem, sorted by position, or nothing.
    pub fn finish(self) -> Result<(), ConfigErrors> {
        let mut errors = self.errors.into_inner();
        if errors.is_empty() {
            return Ok(());
        }
        errors.sort_by_key(|error| (error.origin.line, error.origin.column));
        Err(ConfigErrors(errors))
    }
}
