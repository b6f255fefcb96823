//! Parsing storage connection strings.
//!
//! Supported forms:
//! - `UseDevelopmentStorage=true[;DevelopmentStorageProxyUri=http://host]` — Azurite or the
//!   emulator with the well-known account and key (the SDK parses this but cannot produce
//!   credentials from it);
//! - `AccountName=…;AccountKey=…[;DefaultEndpointsProtocol=https][;EndpointSuffix=core.windows.net]`;
//! - either of the above with explicit `TableEndpoint=`, `QueueEndpoint=`, `BlobEndpoint=`
//!   (Azurite on any port, custom domains);
//! - `SharedAccessSignature=…` with explicit endpoints (or an `AccountName`).
//!
//! Errors name the offending key, never its value when it is a secret.

use azure_core::Url;
use tablekit_core::{Error, Result};

use super::{Credentials, EMULATOR_ACCOUNT, EMULATOR_KEY, Endpoints};

/// The parsed parts of a connection string.
#[derive(Clone)]
pub(crate) struct Parsed {
    pub(crate) account: String,
    pub(crate) credentials: Credentials,
    pub(crate) endpoints: Endpoints,
    /// The endpoint suffix (`EndpointSuffix`, default `core.windows.net`).
    pub(crate) suffix: String,
}

fn invalid(part: &str, reason: impl Into<String>) -> Error {
    Error::InvalidConfig {
        part: part.to_owned(),
        reason: reason.into(),
    }
}

pub(crate) fn endpoint(part: &str, value: &str) -> Result<Url> {
    let url = Url::parse(value.trim_end_matches('/'))
        .map_err(|e| invalid(part, format!("not a URL ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(invalid(part, "must be an http(s) URL with a host"));
    }
    Ok(url)
}

/// Parses a connection string.
pub(crate) fn parse(cs: &str) -> Result<Parsed> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for segment in cs.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((key, value)) = segment.split_once('=') else {
            // Show only the key-like start: a stray segment could be part of a secret.
            let shown: String = segment.chars().take(12).collect();
            return Err(invalid(&shown, "expected `Key=Value`"));
        };
        let key = key.trim();
        if pairs.iter().any(|(k, _)| k.eq_ignore_ascii_case(key)) {
            return Err(invalid(key, "given twice"));
        }
        pairs.push((key.to_owned(), value.trim().to_owned()));
    }
    if pairs.is_empty() {
        return Err(invalid("connection string", "empty"));
    }
    let get = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    for (key, _) in &pairs {
        const KNOWN: [&str; 10] = [
            "UseDevelopmentStorage",
            "DevelopmentStorageProxyUri",
            "DefaultEndpointsProtocol",
            "AccountName",
            "AccountKey",
            "EndpointSuffix",
            "TableEndpoint",
            "QueueEndpoint",
            "BlobEndpoint",
            "SharedAccessSignature",
        ];
        const IGNORED: [&str; 2] = ["FileEndpoint", "TableSecondaryEndpoint"];
        if !KNOWN
            .iter()
            .chain(&IGNORED)
            .any(|k| k.eq_ignore_ascii_case(key))
            && !key.ends_with("SecondaryEndpoint")
        {
            return Err(invalid(key, "unknown connection-string key"));
        }
    }

    let explicit = |name: &str| get(name).map(|v| endpoint(name, v)).transpose();
    let (table, queue, blob) = (
        explicit("TableEndpoint")?,
        explicit("QueueEndpoint")?,
        explicit("BlobEndpoint")?,
    );

    if let Some(flag) = get("UseDevelopmentStorage") {
        if !flag.eq_ignore_ascii_case("true") {
            return Err(invalid(
                "UseDevelopmentStorage",
                "only `true` is meaningful",
            ));
        }
        let proxy = match get("DevelopmentStorageProxyUri") {
            Some(uri) => endpoint("DevelopmentStorageProxyUri", uri)?,
            None => endpoint("DevelopmentStorageProxyUri", "http://127.0.0.1")?,
        };
        let host = proxy.host_str().unwrap_or("127.0.0.1");
        let at = |port: u16| {
            endpoint(
                "DevelopmentStorageProxyUri",
                &format!("{}://{host}:{port}/{EMULATOR_ACCOUNT}", proxy.scheme()),
            )
        };
        return Ok(Parsed {
            account: EMULATOR_ACCOUNT.to_owned(),
            credentials: Credentials::Key {
                key: EMULATOR_KEY.to_owned(),
            },
            endpoints: Endpoints {
                table: table.map_or_else(|| at(10002), Ok)?,
                queue: queue.map_or_else(|| at(10001), Ok)?,
                blob: blob.map_or_else(|| at(10000), Ok)?,
            },
            suffix: "core.windows.net".to_owned(),
        });
    }

    let name = get("AccountName").map(str::to_owned);
    let credentials = match (get("AccountKey"), get("SharedAccessSignature")) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "AccountKey",
                "give either AccountKey or SharedAccessSignature, not both",
            ));
        }
        (Some(key), None) => {
            use base64::Engine as _;
            if base64::engine::general_purpose::STANDARD
                .decode(key)
                .is_err()
            {
                return Err(invalid("AccountKey", "not valid base64"));
            }
            if name.is_none() {
                return Err(invalid("AccountName", "required with AccountKey"));
            }
            Credentials::Key {
                key: key.to_owned(),
            }
        }
        (None, Some(sas)) => Credentials::Sas {
            token: super::sas_token::SasToken::parse(sas)?,
        },
        (None, None) => {
            return Err(invalid(
                "AccountKey",
                "missing: give AccountKey or SharedAccessSignature",
            ));
        }
    };

    let protocol = get("DefaultEndpointsProtocol").unwrap_or("https");
    if !matches!(protocol, "http" | "https") {
        return Err(invalid("DefaultEndpointsProtocol", "must be http or https"));
    }
    let suffix = get("EndpointSuffix").unwrap_or("core.windows.net");
    // The account name: given, or read off any explicit endpoint (a SAS connection string
    // usually lists only the endpoints its token covers).
    let account = match name {
        Some(n) => n,
        None => [&table, &queue, &blob]
            .into_iter()
            .flatten()
            .find_map(account_from_endpoint)
            .ok_or_else(|| invalid("AccountName", "missing, and no endpoint to read it from"))?,
    };
    let derived = |service: &str, explicit: Option<Url>, key: &str| -> Result<Url> {
        match explicit {
            Some(url) => Ok(url),
            None => endpoint(key, &format!("{protocol}://{account}.{service}.{suffix}")),
        }
    };
    let endpoints = Endpoints {
        table: derived("table", table, "TableEndpoint")?,
        queue: derived("queue", queue, "QueueEndpoint")?,
        blob: derived("blob", blob, "BlobEndpoint")?,
    };
    Ok(Parsed {
        account,
        credentials,
        endpoints,
        suffix: suffix.to_owned(),
    })
}

/// `https://acct.table.core.windows.net` → `acct`; `http://127.0.0.1:10002/devstoreaccount1` → `devstoreaccount1`.
pub(crate) fn account_from_endpoint(url: &Url) -> Option<String> {
    if let Some(first) = url
        .path_segments()
        .and_then(|mut s| s.next())
        .filter(|s| !s.is_empty())
    {
        return Some(first.to_owned());
    }
    url.host_str()
        .and_then(|h| h.split('.').next())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn development_storage_gives_emulator_credentials() {
        let p = parse("UseDevelopmentStorage=true").unwrap();
        assert_eq!(p.account, "devstoreaccount1");
        assert_eq!(
            p.endpoints.table.as_str(),
            "http://127.0.0.1:10002/devstoreaccount1"
        );
        assert!(matches!(p.credentials, Credentials::Key { .. }));
        let p =
            parse("UseDevelopmentStorage=true;DevelopmentStorageProxyUri=http://azurite").unwrap();
        assert_eq!(
            p.endpoints.queue.as_str(),
            "http://azurite:10001/devstoreaccount1"
        );
    }

    #[test]
    fn account_keys_derive_endpoints() {
        let p = parse("DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=a2V5;EndpointSuffix=core.chinacloudapi.cn").unwrap();
        assert_eq!(
            p.endpoints.table.as_str(),
            "https://acme.table.core.chinacloudapi.cn/"
        );
        assert_eq!(
            p.endpoints.blob.as_str(),
            "https://acme.blob.core.chinacloudapi.cn/"
        );
        let p = parse("AccountName=acme;AccountKey=a2V5;TableEndpoint=http://127.0.0.1:5000/acme")
            .unwrap();
        assert_eq!(p.endpoints.table.as_str(), "http://127.0.0.1:5000/acme");
        assert_eq!(
            p.endpoints.queue.as_str(),
            "https://acme.queue.core.windows.net/"
        );
    }

    #[test]
    fn sas_connection_strings_need_endpoints() {
        let p = parse("TableEndpoint=https://acme.table.core.windows.net;SharedAccessSignature=sv=2019-02-02&tn=t&sp=r&se=2030-01-01T00:00:00Z&sig=abc%3D").unwrap();
        assert_eq!(p.account, "acme");
        assert!(matches!(p.credentials, Credentials::Sas { .. }));
    }

    #[test]
    fn errors_name_the_bad_part_and_never_the_secret() {
        let cases = [
            ("AccountName=a;AccountKey=not base64!!", "AccountKey"),
            ("AccountKey=a2V5", "AccountName"),
            ("AccountName=a", "AccountKey"),
            (
                "AccountName=a;AccountKey=a2V5;TableEndpoint=ftp://x",
                "TableEndpoint",
            ),
            ("AccountName=a;AccountKey=a2V5;Bogus=1", "Bogus"),
            ("AccountName=a;AccountName=b;AccountKey=a2V5", "AccountName"),
            ("UseDevelopmentStorage=false", "UseDevelopmentStorage"),
            (
                "DefaultEndpointsProtocol=gopher;AccountName=a;AccountKey=a2V5",
                "DefaultEndpointsProtocol",
            ),
            ("", "connection string"),
        ];
        for (cs, part) in cases {
            match parse(cs) {
                Err(Error::InvalidConfig { part: p, reason }) => {
                    assert_eq!(p, part, "{cs}: {reason}");
                    assert!(
                        !reason.contains("a2V5") && !reason.contains("not base64!!"),
                        "{reason}"
                    );
                }
                other => panic!("{cs}: {:?}", other.map(|p| p.account)),
            }
        }
    }
}
