//! Which requests a policy applies to: method, host, and path (exact, prefix or template).

use smallvec::SmallVec;

use super::model::MatchConfig;

/// Values taken from a path template, by name.
pub(crate) type Params<'m, 'p> = SmallVec<[(&'m str, &'p str); 2]>;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PathRule {
    Any,
    Exact(String),
    Template(Vec<Segment>),
}

/// A compiled [`MatchConfig`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Matcher {
    methods: Vec<String>,
    hosts: Vec<String>,
    path: PathRule,
    prefix: Option<String>,
    pattern: String,
}

/// Checks a path template: `{name}` only as a whole segment, names unique and non-empty.
#[cfg(any(feature = "yaml", test))]
pub(crate) fn check_template(template: &str) -> Result<(), String> {
    let mut names = Vec::new();
    for segment in template.split('/') {
        let opens = segment.matches('{').count();
        let closes = segment.matches('}').count();
        if opens == 0 && closes == 0 {
            continue;
        }
        let name = segment
            .strip_prefix('{')
            .and_then(|rest| rest.strip_suffix('}'))
            .filter(|name| opens == 1 && closes == 1 && !name.is_empty())
            .ok_or_else(|| {
                format!("{segment:?}: a parameter must be a whole segment such as {{id}}")
            })?;
        if names.contains(&name) {
            return Err(format!("parameter {{{name}}} appears twice"));
        }
        names.push(name);
    }
    Ok(())
}

fn parse_path(path: &str) -> PathRule {
    if !path.contains('{') {
        return PathRule::Exact(path.to_owned());
    }
    let segments = path
        .split('/')
        .map(
            |segment| match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                Some(name) => Segment::Param(name.to_owned()),
                None => Segment::Literal(segment.to_owned()),
            },
        )
        .collect();
    PathRule::Template(segments)
}

impl Matcher {
    pub(crate) fn new(config: &MatchConfig) -> Self {
        let path = config.path.as_deref().map_or(PathRule::Any, parse_path);
        let pattern = config
            .path
            .clone()
            .or_else(|| {
                config
                    .path_prefix
                    .as_ref()
                    .map(|prefix| format!("{prefix}*"))
            })
            .unwrap_or_default();
        Self {
            methods: config.methods.clone(),
            hosts: config.hosts.clone(),
            path,
            prefix: config.path_prefix.clone(),
            pattern,
        }
    }

    /// The path pattern as written (`/users/{id}`, `/api/*`), empty when any path matches.
    pub(crate) fn pattern(&self) -> &str {
        &self.pattern
    }

    /// The names of the template's parameters.
    pub(crate) fn params(&self) -> Vec<&str> {
        match &self.path {
            PathRule::Template(segments) => segments
                .iter()
                .filter_map(|segment| match segment {
                    Segment::Param(name) => Some(name.as_str()),
                    Segment::Literal(_) => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Whether the request matches; if so, the template's parameter values.
    pub(crate) fn matches<'m, 'p>(
        &'m self,
        method: &str,
        host: Option<&str>,
        path: &'p str,
    ) -> Option<Params<'m, 'p>> {
        if !self.methods.is_empty() && !self.methods.iter().any(|m| m.eq_ignore_ascii_case(method))
        {
            return None;
        }
        if !self.hosts.is_empty() {
            let host = host?.split(':').next().unwrap_or_default();
            let matched = self
                .hosts
                .iter()
                .any(|pattern| match pattern.strip_prefix("*.") {
                    Some(domain) => {
                        host.len() > domain.len() + 1
                            && host[host.len() - domain.len()..].eq_ignore_ascii_case(domain)
                            && host.as_bytes()[host.len() - domain.len() - 1] == b'.'
                    }
                    None => pattern.eq_ignore_ascii_case(host),
                });
            if !matched {
                return None;
            }
        }
        if let Some(prefix) = &self.prefix
            && !path.starts_with(prefix.as_str())
        {
            return None;
        }
        let mut params = Params::new();
        match &self.path {
            PathRule::Any => {}
            PathRule::Exact(exact) => {
                if path != exact {
                    return None;
                }
            }
            PathRule::Template(segments) => {
                let mut parts = path.split('/');
                for segment in segments {
                    let part = parts.next()?;
                    match segment {
                        Segment::Literal(literal) if literal == part => {}
                        Segment::Param(name) if !part.is_empty() => {
                            params.push((name.as_str(), part))
                        }
                        _ => return None,
                    }
                }
                if parts.next().is_some() {
                    return None;
                }
            }
        }
        Some(params)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matcher(
        methods: &[&str],
        hosts: &[&str],
        path: Option<&str>,
        prefix: Option<&str>,
    ) -> Matcher {
        Matcher::new(&MatchConfig {
            methods: methods.iter().map(|m| m.to_string()).collect(),
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            path: path.map(str::to_owned),
            path_prefix: prefix.map(str::to_owned),
        })
    }

    #[test]
    fn templates_match_whole_segments_and_capture_them() {
        let m = matcher(&[], &[], Some("/users/{id}/posts/{post}"), None);
        let params = m.matches("GET", None, "/users/42/posts/7").unwrap();
        assert_eq!(params.as_slice(), [("id", "42"), ("post", "7")]);
        assert!(m.matches("GET", None, "/users/42/posts").is_none());
        assert!(
            m.matches("GET", None, "/users//posts/7").is_none(),
            "an empty segment is no value"
        );
        assert!(m.matches("GET", None, "/users/42/posts/7/x").is_none());
        assert_eq!(m.params(), ["id", "post"]);
    }

    #[test]
    fn methods_hosts_and_prefixes_narrow_the_match() {
        let m = matcher(&["POST"], &["*.example.com"], None, Some("/api/"));
        assert!(
            m.matches("post", Some("eu.example.com:8443"), "/api/v1")
                .is_some()
        );
        assert!(
            m.matches("GET", Some("eu.example.com"), "/api/v1")
                .is_none()
        );
        assert!(m.matches("POST", Some("example.com"), "/api/v1").is_none());
        assert!(
            m.matches("POST", Some("badexample.com"), "/api/v1")
                .is_none()
        );
        assert!(m.matches("POST", Some("eu.example.com"), "/apix").is_none());
        assert!(
            m.matches("POST", None, "/api/v1").is_none(),
            "a host rule needs a host"
        );
        assert_eq!(m.pattern(), "/api/*");
    }

    #[test]
    fn bad_templates_are_explained() {
        assert!(check_template("/users/{id}").is_ok());
        assert!(
            check_template("/users/x{id}")
                .unwrap_err()
                .contains("whole segment")
        );
        assert!(check_template("/a/{}").is_err());
        assert!(
            check_template("/a/{id}/{id}")
                .unwrap_err()
                .contains("twice")
        );
    }
}
