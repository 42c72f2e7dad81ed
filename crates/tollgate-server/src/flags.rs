//! Values of flags that several commands take, the server's and `tollgate-tools`' alike.

/// Parses a duration flag such as `300ms`, `10s` or `5m`.
pub fn duration_arg(text: &str) -> Result<std::time::Duration, String> {
    tollgate::parse_duration(text).map_err(|error| error.to_string())
}
