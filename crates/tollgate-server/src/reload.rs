//! Live reload: the policy file and the RLS directory are watched, and SIGHUP reloads both. A
//! configuration that fails validation is refused with a logged error and the previous one
//! stays in force; requests under way finish with the configuration they started with.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tollgate::{AnyStore, Limiter};

use tollgate_envoy::rls::{Rls, RlsConfig};
use tollgate_http::tls::Tls;

/// What is reloaded, and the counts of reloads (for metrics and logs).
#[derive(Debug)]
pub struct Reloader {
    pub(crate) limiter: Limiter<AnyStore>,
    pub(crate) rls: Option<Arc<Rls>>,
    pub(crate) config: Option<PathBuf>,
    pub(crate) rls_config: Option<PathBuf>,
    /// A link above the RLS directory whose replacement reloads it (`following_root`).
    pub(crate) rls_root: Option<PathBuf>,
    /// Whether a reload may leave the rate limit service with no domain (`--rls-allow-empty`).
    pub(crate) rls_empty_allowed: bool,
    /// The listeners' certificates, when they serve TLS.
    pub(crate) tls: Option<Tls>,
    /// Reloads that took effect.
    pub succeeded: AtomicU64,
    /// Reloads refused.
    pub failed: AtomicU64,
}

impl Reloader {
    /// A reloader for these files; the RLS directory only with a rate limit service. Paths
    /// are made absolute (the directories resolved, not the files, which a mounted ConfigMap
    /// keeps as links it swaps), so that the watcher's events, which name absolute paths, are
    /// recognised whatever the paths given were relative to.
    pub fn new(
        limiter: Limiter<AnyStore>,
        rls: Option<Arc<Rls>>,
        config: Option<PathBuf>,
        rls_config: Option<PathBuf>,
    ) -> Self {
        Self {
            limiter,
            rls,
            config: config.map(|file| absolute_file(&file)),
            rls_config: rls_config.map(|directory| absolute_directory(&directory)),
            rls_root: None,
            rls_empty_allowed: false,
            tls: None,
            succeeded: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }

    /// Reloads when `root` is swapped for another (a link replaced, as envoyproxy/ratelimit's
    /// RUNTIME_WATCH_ROOT has deployments do), reading `directory` through it as named.
    #[must_use]
    pub fn following_root(mut self, root: &Path, directory: &Path) -> Self {
        let absolute =
            |path: &Path| std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        self.rls_config = Some(absolute(directory));
        self.rls_root = Some(absolute(root));
        self
    }

    /// Lets a reload leave the rate limit service with no domain, which switches every Envoy
    /// limit off; without it such a reload (an emptied directory, say) is refused.
    #[must_use]
    pub fn allowing_no_rls_domains(mut self, allowed: bool) -> Self {
        self.rls_empty_allowed = allowed;
        self
    }

    /// Also reloads the listeners' certificates.
    #[must_use]
    pub fn with_tls(mut self, tls: Option<Tls>) -> Self {
        self.tls = tls;
        self
    }

    /// Reloads everything once; `tollgate_config_last_reload_successful` says whether every
    /// file was taken.
    pub fn reload(&self) {
        let failed_before = self.failed.load(Ordering::Relaxed);
        self.reload_each();
        let all_taken = self.failed.load(Ordering::Relaxed) == failed_before;
        self.limiter
            .telemetry()
            .metrics()
            .set_last_reload_successful(all_taken);
    }

    fn reload_each(&self) {
        if let Some(path) = &self.config {
            self.reload_policies(path);
        }
        if let Some(tls) = &self.tls {
            self.reload_tls(tls);
        }
        if let (Some(directory), Some(rls)) = (&self.rls_config, &self.rls) {
            self.reload_rls(directory, rls);
        }
    }

    /// Reloads the policies from `path`; an unchanged file changes nothing, and a file that
    /// lost every policy by omission is refused while policies are in force.
    fn reload_policies(&self, path: &Path) {
        let loaded = crate::policies::load(Some(path)).and_then(|policies| {
            // Switching every limit off takes an explicit `policies: []`.
            let had_policies = self
                .limiter
                .policies()
                .is_some_and(|old| old.names().next().is_some());
            match crate::policies::empty_by_omission(path, &policies) {
                Some(problem) if had_policies => Err(problem),
                _ => Ok(policies),
            }
        });
        match loaded {
            Ok(policies) => {
                let old = self.limiter.policies();
                let changed = old
                    .as_ref()
                    .is_none_or(|old| old.version() != policies.version());
                if changed {
                    let what = old.map_or_else(
                        || "first load".to_owned(),
                        |old| what_changed(old.config(), policies.config()),
                    );
                    tracing::info!(file = %path.display(), version = format!("{:016x}", policies.version()), "policies reloaded: {what}");
                    self.limiter.settings().set_policies(policies);
                }
                self.succeeded.fetch_add(1, Ordering::Relaxed);
                self.limiter.telemetry().metrics().record_reload(true);
            }
            Err(errors) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                self.limiter.telemetry().metrics().record_reload(false);
                tracing::error!(file = %path.display(), "policies refused, the previous ones stay in force:\n{errors}");
            }
        }
    }

    /// Reloads the TLS certificates.
    fn reload_tls(&self, tls: &Tls) {
        self.record(match tls.reload() {
            Ok(()) => {
                tracing::info!("TLS certificates reloaded");
                true
            }
            Err(error) => {
                tracing::error!(
                    "TLS certificates refused, the previous ones stay in force: {error}"
                );
                false
            }
        });
    }

    /// Reloads the rate limit service's configuration from `directory`; one without a domain
    /// is refused while domains are configured, unless empty configurations are allowed.
    fn reload_rls(&self, directory: &Path, rls: &Rls) {
        let loaded = RlsConfig::load_dir_merging(directory, rls.merges_domains())
            .map_err(|errors| errors.to_string())
            .and_then(|config| {
                let had_domains = rls.config().domains().next().is_some();
                if had_domains && config.domains().next().is_none() && !self.rls_empty_allowed {
                    return Err(
                        "it holds no domain, which would switch every Envoy limit off; \
                         start with --rls-allow-empty to allow that"
                            .to_owned(),
                    );
                }
                Ok(config)
            });
        match loaded {
            Ok(config) => {
                let what = rls.config().domains_changed(&config);
                tracing::info!(directory = %directory.display(), domains = config.domains().count(), "rate limit service configuration reloaded: {what}");
                rls.set_config(config);
                self.succeeded.fetch_add(1, Ordering::Relaxed);
                self.limiter.telemetry().metrics().record_reload(true);
            }
            Err(errors) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                self.limiter.telemetry().metrics().record_reload(false);
                tracing::error!(directory = %directory.display(), "rate limit service configuration refused, the previous one stays in force:\n{errors}");
            }
        }
    }

    fn record(&self, succeeded: bool) {
        let count = if succeeded {
            &self.succeeded
        } else {
            &self.failed
        };
        count.fetch_add(1, Ordering::Relaxed);
        self.limiter.telemetry().metrics().record_reload(succeeded);
    }

    /// Reloads on SIGHUP and, when `watch`, on changes to the files, until the process ends;
    /// changes settle for a moment before a reload, so an editor's several writes make one.
    /// The signal handler and the file watch are in place when this returns, so a server that
    /// announces itself afterwards misses no signal and no change (a SIGHUP before the handler
    /// would end the process). Call it inside a Tokio runtime.
    pub fn start(self: Arc<Self>, watch: bool) {
        let (changes, changed) = mpsc::unbounded_channel::<()>();
        let config_name = self
            .config
            .as_ref()
            .and_then(|file| file.file_name().map(ToOwned::to_owned));
        let rls_directory = self.rls_config.clone();
        let rls_root = self.rls_root.clone();
        let tls_files: Vec<PathBuf> = self
            .tls
            .iter()
            .flat_map(|tls| tls.paths().into_iter().map(Path::to_path_buf))
            .collect();
        let tls_names: Vec<_> = tls_files
            .iter()
            .filter_map(|file| file.file_name().map(ToOwned::to_owned))
            .collect();
        // Other files in the policy file's directory come and go without a reload, but for
        // the `..data` links through which Kubernetes swaps a mounted ConfigMap.
        let relevant = move |path: &std::path::Path| {
            let name = path.file_name();
            config_name
                .as_deref()
                .is_some_and(|config| name == Some(config))
                || name.is_some_and(|name| name.as_encoded_bytes().starts_with(b".."))
                || rls_directory
                    .as_ref()
                    .is_some_and(|directory| path.starts_with(directory))
                || name.is_some_and(|name| tls_names.iter().any(|tls| tls == name))
                || rls_root.as_deref() == Some(path)
        };
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if event.is_ok_and(|e| !e.kind.is_access() && e.paths.iter().any(|path| relevant(path)))
            {
                let _ = changes.send(());
            }
        });
        let mut watcher = match watcher {
            Ok(_) if !watch => None,
            Ok(watcher) => Some(watcher),
            Err(error) => {
                tracing::warn!("cannot watch configuration files ({error}); SIGHUP still reloads");
                None
            }
        };
        if let Some(watcher) = watcher.as_mut() {
            self.watch_directories(watcher, &tls_files);
        }
        let hangup = hangup_signal();
        tokio::spawn(self.listen(watcher, changed, hangup));
    }

    /// Watches the directories of the policy file and the certificates (editors replace
    /// files), the rate limit service's directory with everything below it, and the parent
    /// of its root link: each directory once.
    fn watch_directories(&self, watcher: &mut notify::RecommendedWatcher, tls_files: &[PathBuf]) {
        // Editors replace files, so watch the directory that holds the policy file.
        let targets = self
            .config
            .iter()
            .chain(tls_files)
            .filter_map(|file| {
                file.parent().map(|dir| {
                    (
                        if dir.as_os_str().is_empty() {
                            PathBuf::from(".")
                        } else {
                            dir.to_path_buf()
                        },
                        RecursiveMode::NonRecursive,
                    )
                })
            })
            .chain(
                self.rls_config
                    .iter()
                    .map(|dir| (dir.clone(), RecursiveMode::Recursive)),
            )
            .chain(self.rls_root.iter().filter_map(|root| {
                root.parent()
                    .map(|parent| (parent.to_path_buf(), RecursiveMode::NonRecursive))
            }));
        let mut watched: Vec<PathBuf> = Vec::new();
        for (target, mode) in targets {
            // Certificates often sit beside the policy file: one watch a directory.
            if watched.contains(&target) {
                continue;
            }
            watched.push(target.clone());
            if let Err(error) = watcher.watch(&target, mode) {
                tracing::warn!(path = %target.display(), "cannot watch ({error}); SIGHUP still reloads");
            }
        }
    }

    /// Reloads on every change and signal; `_watcher` is kept alive while it runs.
    async fn listen(
        self: Arc<Self>,
        _watcher: Option<notify::RecommendedWatcher>,
        mut changed: mpsc::UnboundedReceiver<()>,
        mut hangup: Option<tokio::signal::unix::Signal>,
    ) {
        loop {
            tokio::select! {
                Some(()) = changed.recv() => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    while changed.try_recv().is_ok() {}
                }
                Some(()) = async { match hangup.as_mut() { Some(signal) => signal.recv().await, None => std::future::pending().await } } => {
                    tracing::info!("SIGHUP: reloading");
                }
                else => return,
            }
            self.reload();
        }
    }
}

/// What a reload changed in the policy file: the policies added, removed and changed by name,
/// and whether the settings beside them did.
fn what_changed(old: &tollgate::Config, new: &tollgate::Config) -> String {
    let named = |config: &tollgate::Config| -> std::collections::BTreeMap<String, tollgate::policy::PolicyConfig> {
        config
            .policies
            .iter()
            .map(|policy| (policy.name.clone(), policy.clone()))
            .collect()
    };
    let (before, after) = (named(old), named(new));
    let added: Vec<&str> = after
        .keys()
        .filter(|name| !before.contains_key(*name))
        .map(String::as_str)
        .collect();
    let removed: Vec<&str> = before
        .keys()
        .filter(|name| !after.contains_key(*name))
        .map(String::as_str)
        .collect();
    let changed: Vec<&str> = after
        .iter()
        .filter(|(name, policy)| before.get(*name).is_some_and(|old| old != *policy))
        .map(|(name, _)| name.as_str())
        .collect();
    let settings = {
        let strip = |config: &tollgate::Config| tollgate::Config {
            policies: Vec::new(),
            ..config.clone()
        };
        strip(old) != strip(new)
    };
    let mut parts = Vec::new();
    for (what, names) in [("added", added), ("removed", removed), ("changed", changed)] {
        if !names.is_empty() {
            parts.push(format!("{what} {}", names.join(", ")));
        }
    }
    if settings {
        parts.push("settings beside the policies changed".to_owned());
    }
    if parts.is_empty() {
        return "the policies' order or wording changed, not what they do".to_owned();
    }
    parts.join("; ")
}

/// `file` with its directory made absolute and resolved; the file itself is kept as named.
fn absolute_file(file: &Path) -> PathBuf {
    let (Some(name), Some(directory)) = (file.file_name(), file.parent()) else {
        return std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
    };
    let directory = if directory.as_os_str().is_empty() {
        Path::new(".")
    } else {
        directory
    };
    absolute_directory(directory).join(name)
}

/// `directory` made absolute and resolved (as named, if it cannot be resolved yet).
fn absolute_directory(directory: &Path) -> PathBuf {
    std::fs::canonicalize(directory)
        .or_else(|_| std::path::absolute(directory))
        .unwrap_or_else(|_| directory.to_path_buf())
}

fn hangup_signal() -> Option<tokio::signal::unix::Signal> {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok()
}
