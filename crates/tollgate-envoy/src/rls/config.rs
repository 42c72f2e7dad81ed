//! envoyproxy/ratelimit's YAML configuration: one document per domain, files in a directory.
//!
//! ```yaml
//! domain: mongo_cps
//! descriptors:
//!   - key: database
//!     value: users
//!     rate_limit: { unit: second, requests_per_unit: 500 }
//!   - key: database
//!     rate_limit: { unit: second, requests_per_unit: 50 }
//! ```
//!
//! Beyond envoyproxy/ratelimit, a `rate_limit` may name an `algorithm` (any of the six, with a
//! `burst` for the rate algorithms), a `period` of any length (`30s`, `5m`) instead of a
//! unit, `count_refused` (charge refused hits too, as the classic window does) and, for a fixed
//! window of a day, week, month or year, a `calendar` (`{ tz: Europe/Berlin, anchor_day: 15 }`,
//! as the policy file writes it) that aligns its windows to the calendar in a time zone; without
//! them a limit is the classic fixed window of `requests_per_unit` per unit.
//! Unknown fields are errors at every level.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tollgate::yaml::ConfigErrors;
use tollgate::{Algorithm, LimitSpec, Quota};

use super::proto::service::rate_limit_response::rate_limit::Unit;
use super::tree::{Enforcement, Node, Rule};

/// The most configuration files read from a directory.
pub const MAX_FILES: usize = 1_000;
/// The deepest descriptor nesting accepted.
pub const MAX_DEPTH: usize = 16;

/// Every domain's descriptor tree.
#[derive(Debug, Default)]
pub struct RlsConfig {
    pub(crate) domains: HashMap<String, Node>,
    /// Per domain, what the quota service assigns a bucket no descriptor matches.
    pub(crate) unmatched_buckets: HashMap<String, Arc<Rule>>,
    /// The files read, in order.
    pub files: Vec<PathBuf>,
}

impl RlsConfig {
    /// The domains configured.
    pub fn domains(&self) -> impl Iterator<Item = &str> {
        self.domains.keys().map(String::as_str)
    }

    /// What replacing this configuration with `new` changes in the domains, for the log line
    /// of a reload: `3 domains; added a; removed b`.
    pub fn domains_changed(&self, new: &RlsConfig) -> String {
        let before: std::collections::BTreeSet<&str> = self.domains().collect();
        let after: std::collections::BTreeSet<&str> = new.domains().collect();
        let added: Vec<&str> = after.difference(&before).copied().collect();
        let removed: Vec<&str> = before.difference(&after).copied().collect();
        let mut parts = vec![format!("{} domains", after.len())];
        if !added.is_empty() {
            parts.push(format!("added {}", added.join(", ")));
        }
        if !removed.is_empty() {
            parts.push(format!("removed {}", removed.join(", ")));
        }
        parts.join("; ")
    }

    /// One line per limit, sorted, as envoyproxy/ratelimit's debug endpoint `/rlconfig` lists
    /// them: `domain.key_value.key: unit=MINUTE requests_per_unit=10, shadow_mode: false,
    /// quota_mode: false`.
    pub fn describe_limits(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for (domain, root) in &self.domains {
            super::tree::visit_rules(root, &mut |rule| {
                let mut full_key = domain.clone();
                for part in &rule.stat_path {
                    full_key.push('.');
                    full_key.push_str(part);
                }
                lines.push(format!(
                    "{full_key}: unit={} requests_per_unit={}, shadow_mode: {}, quota_mode: {}",
                    rule.unit.as_str_name(),
                    rule.requests_per_unit,
                    rule.shadow,
                    rule.quota_mode
                ));
            });
        }
        lines.sort();
        lines
    }

    /// Reads every `.yaml` and `.yml` file under `directory` (recursively, in path order).
    /// Any problem in any file refuses the whole configuration, with every error located.
    pub fn load_dir(directory: &Path) -> Result<RlsConfig, ConfigErrors> {
        Self::load_dir_merging(directory, false)
    }

    /// As [`RlsConfig::load_dir`]; with `merge_domains`, a domain in several files has the
    /// descriptors of them all (a descriptor key that two files give at the top is an error).
    pub fn load_dir_merging(
        directory: &Path,
        merge_domains: bool,
    ) -> Result<RlsConfig, ConfigErrors> {
        let mut files = Vec::new();
        collect(directory, &mut files, 0).map_err(|error| {
            ConfigErrors::single(&directory.display().to_string(), error.to_string())
        })?;
        files.sort();
        if files.len() > MAX_FILES {
            return Err(ConfigErrors::single(
                &directory.display().to_string(),
                format!(
                    "{} configuration files, the maximum is {MAX_FILES}",
                    files.len()
                ),
            ));
        }
        let mut config = RlsConfig::default();
        let mut errors = Vec::new();
        for file in &files {
            let source = file.display().to_string();
            match std::fs::read_to_string(file) {
                Ok(text) => config.add(&source, &text, merge_domains, "file", &mut errors),
                Err(error) => {
                    errors.extend(ConfigErrors::single(&source, format!("cannot read: {error}")).0);
                }
            }
        }
        config.files = files;
        if errors.is_empty() {
            Ok(config)
        } else {
            Err(ConfigErrors(errors))
        }
    }

    /// Every domain of `documents`, each a `(source, text)` pair read as one file is (xDS
    /// resources), merging a domain's documents with `merge_domains`; `noun` says what a
    /// document is in messages.
    pub(crate) fn from_sources<'t>(
        documents: impl IntoIterator<Item = (&'t str, &'t str)>,
        merge_domains: bool,
        noun: &str,
    ) -> Result<RlsConfig, ConfigErrors> {
        let mut config = RlsConfig::default();
        let mut errors = Vec::new();
        for (source, text) in documents {
            config.add(source, text, merge_domains, noun, &mut errors);
        }
        if errors.is_empty() {
            Ok(config)
        } else {
            Err(ConfigErrors(errors))
        }
    }

    /// Adds one document's domain, as envoyproxy/ratelimit does: a domain already there is an
    /// error, or with `merge_domains` gains the document's descriptors.
    fn add(
        &mut self,
        source: &str,
        text: &str,
        merge_domains: bool,
        noun: &str,
        errors: &mut Vec<tollgate::yaml::ConfigError>,
    ) {
        let document = match parse(source, text) {
            Ok(document) => document,
            Err(found) => {
                errors.extend(found.0);
                return;
            }
        };
        match self.domains.entry(document.domain) {
            std::collections::hash_map::Entry::Occupied(mut taken) if merge_domains => {
                for duplicate in taken.get_mut().merge(document.root) {
                    errors.extend(
                        ConfigErrors::single(
                            source,
                            format!(
                                "domain {:?}: descriptor {duplicate:?} is already configured by another {noun}",
                                taken.key()
                            ),
                        )
                        .0,
                    );
                }
                if let Some(rule) = document.unmatched_buckets {
                    self.unmatched_buckets.insert(taken.key().clone(), rule);
                }
            }
            std::collections::hash_map::Entry::Occupied(taken) => errors.extend(
                ConfigErrors::single(
                    source,
                    format!(
                        "domain {:?} is already configured by another {noun} \
                         (--rls-merge-domains merges them)",
                        taken.key()
                    ),
                )
                .0,
            ),
            std::collections::hash_map::Entry::Vacant(free) => {
                if let Some(rule) = document.unmatched_buckets {
                    self.unmatched_buckets.insert(free.key().clone(), rule);
                }
                free.insert(document.root);
            }
        }
    }

    /// Reads one domain's configuration from text (for tests and tools).
    pub fn from_documents(documents: &[(&str, &str)]) -> Result<RlsConfig, ConfigErrors> {
        let mut config = RlsConfig::default();
        for (source, text) in documents {
            let document = parse(source, text)?;
            let domain = document.domain;
            if let Some(rule) = document.unmatched_buckets {
                config.unmatched_buckets.insert(domain.clone(), rule);
            }
            if config
                .domains
                .insert(domain.clone(), document.root)
                .is_some()
            {
                return Err(ConfigErrors::single(
                    source,
                    format!("domain {domain:?} is configured twice"),
                ));
            }
        }
        Ok(config)
    }
}

fn collect(directory: &Path, files: &mut Vec<PathBuf>, depth: usize) -> std::io::Result<()> {
    if depth > 8 {
        return Ok(());
    }
    for entry in std::fs::read_dir(directory)? {
        let path = entry?.path();
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'));
        if hidden {
            continue;
        }
        if path.is_dir() {
            collect(&path, files, depth + 1)?;
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        ) {
            files.push(path);
        }
    }
    Ok(())
}

/// Parses one file: its domain, descriptor tree and default for unmatched quota buckets.
pub(crate) fn parse(source: &str, text: &str) -> Result<super::parse::Document, ConfigErrors> {
    super::parse::document(source, text)
}

/// A limit as a rule's `rate_limit` describes it.
pub(crate) struct RuleLimit {
    pub(crate) unlimited: bool,
    pub(crate) requests_per_unit: u32,
    pub(crate) unit: Unit,
    pub(crate) period: Duration,
    pub(crate) algorithm: Algorithm,
    pub(crate) burst: Option<u64>,
    pub(crate) name: Option<String>,
    pub(crate) replaces: Vec<String>,
    /// `count_refused`: whether refused hits are charged (the default for the fixed window).
    pub(crate) count_refused: Option<bool>,
    /// `calendar`: the fixed window counts calendar periods in a time zone.
    pub(crate) calendar: Option<tollgate::CalendarSpec>,
}

impl RuleLimit {
    /// What enforces it: a Tollgate limit named after the rule so its state is its own, or no
    /// limit at all for an unlimited rule and for one of zero requests, which blocks.
    pub(crate) fn build(&self, state_name: String) -> Result<Enforcement, String> {
        if self.unlimited {
            return Ok(Enforcement::Unlimited);
        }
        if self.requests_per_unit == 0 {
            return Ok(Enforcement::Blocked);
        }
        let quota = Quota::new(u64::from(self.requests_per_unit), self.period)
            .map_err(|e| e.to_string())?;
        // A window counts hits past the limit within itself and forgets them when it ends, as
        // upstream's counters do: refused hits owe nothing in the next window.
        let spec = LimitSpec {
            burst: self.burst,
            debt_expires_with_window: true,
            calendar: self.calendar.clone(),
            ..LimitSpec::new(self.algorithm, quota)
        };
        let limit = spec.build(state_name).map_err(|error| error.detail())?;
        Ok(Enforcement::Limit(limit))
    }

    pub(crate) fn into_rule(self, enforcement: Enforcement, options: RuleOptions) -> Arc<Rule> {
        Arc::new(Rule {
            requests_per_unit: self.requests_per_unit,
            unit: self.unit,
            name: self.name,
            replaces: self.replaces,
            shadow: options.shadow,
            quota_mode: options.quota_mode,
            metadata: options.metadata,
            // A calendar window resets at the calendar's boundary, not at a multiple of its
            // unit, and upstream keeps no such counter.
            classic: self.algorithm == Algorithm::FixedWindow && self.calendar.is_none(),
            counts_refused: self
                .count_refused
                .unwrap_or(self.algorithm == Algorithm::FixedWindow),
            enforcement,
            stat_path: options.stat_path,
            detailed_metric: options.detailed_metric,
            stats: OnceLock::new(),
            label: OnceLock::new(),
        })
    }
}

/// What a descriptor says beside its limit.
#[derive(Debug, Default)]
pub(crate) struct RuleOptions {
    pub(crate) shadow: bool,
    pub(crate) quota_mode: bool,
    pub(crate) metadata: Option<prost_types::Struct>,
    pub(crate) detailed_metric: bool,
    /// `key_value` or `key` per level from the domain down to the descriptor.
    pub(crate) stat_path: Vec<String>,
}
