//! `--admin`, `--admin-token`, `--admin-read-token` and `--admin-host`: where the admin API
//! and dashboard (`tollgate_http::admin`) listen, and who may use them.

use std::net::SocketAddr;

use tollgate_http::admin::{AllowedHosts, Tokens};

/// `--admin` and `--admin-token`.
#[derive(Debug, Clone, clap::Args)]
pub struct AdminArgs {
    /// Where the admin API and the dashboard listen.
    #[arg(
        long,
        env = "TOLLGATE_ADMIN",
        default_value = "127.0.0.1:9090",
        value_name = "ADDR"
    )]
    pub admin: SocketAddr,
    /// The bearer token the admin API requires; required when --admin is not a loopback address.
    #[arg(
        long,
        env = "TOLLGATE_ADMIN_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub admin_token: Option<String>,
    /// A second bearer token that may only read (`GET`): the dashboard, stats, the
    /// configuration, the overrides and their export. Needs --admin-token beside it.
    #[arg(
        long,
        env = "TOLLGATE_ADMIN_READ_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub admin_read_token: Option<String>,
    /// A further name the admin listener answers to (its own address, localhost, 127.0.0.1 and
    /// `[::1]` with its port always work); repeat for more. Without a port, the name alone and
    /// the name with the listener's port match.
    #[arg(
        long = "admin-host",
        env = "TOLLGATE_ADMIN_HOSTS",
        value_delimiter = ',',
        value_name = "NAME[:PORT]"
    )]
    pub admin_hosts: Vec<String>,
}

impl AdminArgs {
    /// Refuses an admin listener open to the network without a token.
    pub fn validate(&self) -> Result<(), String> {
        if !self.admin.ip().is_loopback() && self.admin_token.as_deref().is_none_or(str::is_empty) {
            return Err(format!(
                "--admin {} is not a loopback address: give --admin-token (or TOLLGATE_ADMIN_TOKEN)",
                self.admin
            ));
        }
        if self
            .admin_read_token
            .as_deref()
            .is_some_and(|read| !read.is_empty())
        {
            match self.admin_token.as_deref() {
                None | Some("") => {
                    return Err("--admin-read-token needs --admin-token beside it (for the changes the read token cannot make)".to_owned());
                }
                Some(write) if Some(write) == self.admin_read_token.as_deref() => {
                    return Err("--admin-read-token must differ from --admin-token".to_owned());
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// The tokens the admin API takes.
    pub fn tokens(&self) -> Tokens {
        let given = |token: &Option<String>| token.clone().filter(|t| !t.is_empty());
        Tokens {
            write: given(&self.admin_token),
            read: given(&self.admin_read_token),
        }
    }

    /// The addresses and names the listener bound at `bound` answers to.
    pub fn allowed_hosts(&self, bound: SocketAddr) -> Result<AllowedHosts, String> {
        AllowedHosts::new(bound, &self.admin_hosts)
    }
}
