//! The client's session state: what the ping decided and the auth mode. Types only, so the
//! client and the files that drive it can all name them.

/// What the ping decided.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    /// `https://<registry>` or `http://<registry>`.
    pub base: String,
    /// The registry answered over plain HTTP.
    pub plain_http: bool,
}

pub(crate) enum AuthMode {
    /// Credentials (if any) sent with every request.
    Basic,
    /// A token from the realm sent with every request.
    Bearer(Bearer),
}

pub(crate) struct Bearer {
    pub realm: String,
    pub service: Option<String>,
    pub scopes: Vec<String>,
    pub token: Option<String>,
    /// From an OAuth2 answer; used instead of the keychain's credentials afterwards.
    pub refresh_token: Option<String>,
}
