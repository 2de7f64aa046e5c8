//! Values encrypted by sops (`ENC[AES256_GCM,data:…,iv:…,tag:…,type:…]`, reference §6):
//! AES-256-GCM with a 32-byte IV under the data key, the value's path as additional data,
//! and the value's type restored from the `type:` field.

pub(crate) mod gofmt;
pub(crate) mod gotime;

use std::borrow::Cow;
use std::sync::LazyLock;

use aes_gcm::AesGcm;
use aes_gcm::aead::consts::{U12, U16, U32};
use aes_gcm::aead::generic_array::{ArrayLength, GenericArray};
use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use aes_gcm::aes::Aes256;
use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use regex::Regex;
use zeroize::Zeroizing;

use crate::tree::Value;

/// Why a value could not be decrypted. Never carries the value itself.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CipherError {
    /// Not in the `ENC[AES256_GCM,…]` form (sops prints the value here; Flux redacts it).
    #[error("Input string <redacted> does not match sops' data format")]
    Format,
    #[error("Error base64-decoding {0}: illegal base64 data")]
    Base64(&'static str),
    #[error("cipher: IV length {0} is not supported")]
    IvLength(usize),
    /// Wrong key, wrong path or tampered data.
    #[error("Could not decrypt with AES_GCM: cipher: message authentication failed")]
    Auth,
    #[error("Unknown datatype: {0}")]
    UnknownType(String),
    /// The plaintext does not parse as the type it claims.
    #[error("the decrypted value is not a valid {0}")]
    BadTyped(&'static str),
    /// The value to encrypt has no scalar form.
    #[error("Value to encrypt has unsupported type {0}")]
    Unsupported(&'static str),
}

/// Go's `StdEncoding`: standard alphabet, padding required, non-zero trailing bits accepted.
const GO_STD: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
);

#[allow(clippy::expect_used)]
static ENC_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^ENC\[AES256_GCM,data:(.+),iv:(.+),tag:(.+),type:(.+)\]")
        .expect("constant pattern")
});

/// Decodes std base64 as Go does, which skips `\r` and `\n` inside the text.
pub(crate) fn go_base64(text: &str) -> Option<Vec<u8>> {
    if text.contains(['\r', '\n']) {
        let clean: String = text.chars().filter(|c| *c != '\r' && *c != '\n').collect();
        GO_STD.decode(clean).ok()
    } else {
        GO_STD.decode(text).ok()
    }
}

/// The parts of an encrypted value.
struct Parsed {
    data: Vec<u8>,
    iv: Vec<u8>,
    tag: Vec<u8>,
    datatype: String,
}

fn parse(value: &str) -> Result<Parsed, CipherError> {
    let caps = ENC_RE.captures(value).ok_or(CipherError::Format)?;
    let group = |i: usize| caps.get(i).map_or("", |m| m.as_str());
    Ok(Parsed {
        data: go_base64(group(1)).ok_or(CipherError::Base64("data"))?,
        iv: go_base64(group(2)).ok_or(CipherError::Base64("iv"))?,
        tag: go_base64(group(3)).ok_or(CipherError::Base64("tag"))?,
        datatype: group(4).to_string(),
    })
}

/// Whether `value` looks like a sops-encrypted value (the `ENC[AES256_GCM,` form).
pub fn is_encrypted(value: &str) -> bool {
    ENC_RE.is_match(value)
}

fn gcm_open<N: ArrayLength<u8>>(
    key: &[u8; 32],
    iv: &[u8],
    sealed: &[u8],
    ad: &str,
) -> Result<Vec<u8>, CipherError> {
    let cipher = AesGcm::<Aes256, N>::new(GenericArray::from_slice(key));
    cipher
        .decrypt(
            GenericArray::from_slice(iv),
            Payload {
                msg: sealed,
                aad: ad.as_bytes(),
            },
        )
        .map_err(|_| CipherError::Auth)
}

/// Decrypts one value with the data key and its additional data (the path string).
/// `""` decrypts to an empty string, as in sops.
pub fn decrypt(value: &str, key: &[u8; 32], ad: &str) -> Result<Value, CipherError> {
    if value.is_empty() {
        return Ok(Value::Str(String::new()));
    }
    let p = parse(value)?;
    // Go opens `data || tag`: the split between the two fields does not matter.
    let mut sealed = p.data;
    sealed.extend_from_slice(&p.tag);
    if sealed.len() < 16 {
        return Err(CipherError::Auth);
    }
    let plain = Zeroizing::new(match p.iv.len() {
        32 => gcm_open::<U32>(key, &p.iv, &sealed, ad)?,
        12 => gcm_open::<U12>(key, &p.iv, &sealed, ad)?,
        16 => gcm_open::<U16>(key, &p.iv, &sealed, ad)?,
        n => return Err(CipherError::IvLength(n)),
    });
    typed(&plain, &p.datatype)
}

/// Restores a plaintext of the given sops type.
fn typed(plain: &[u8], datatype: &str) -> Result<Value, CipherError> {
    let text = || std::str::from_utf8(plain).ok();
    Ok(match datatype {
        "str" => match std::str::from_utf8(plain) {
            Ok(s) => Value::Str(s.to_string()),
            Err(_) => Value::Bytes(plain.to_vec()),
        },
        "int" => Value::Int(
            text()
                .and_then(gofmt::atoi)
                .ok_or(CipherError::BadTyped("int"))?,
        ),
        "float" => Value::Float(
            text()
                .and_then(gofmt::parse_float)
                .ok_or(CipherError::BadTyped("float"))?,
        ),
        "bool" => Value::Bool(
            text()
                .and_then(gofmt::parse_bool)
                .ok_or(CipherError::BadTyped("bool"))?,
        ),
        "time" => Value::Time(
            text()
                .and_then(gotime::GoTime::parse)
                .map(|t| t.format_nanos())
                .ok_or(CipherError::BadTyped("time"))?,
        ),
        "bytes" => Value::Bytes(plain.to_vec()),
        "comment" => Value::Comment(String::from_utf8_lossy(plain).into_owned()),
        other => return Err(CipherError::UnknownType(other.chars().take(64).collect())),
    })
}

/// The bytes sops hashes into the MAC and encrypts for a scalar (`ToBytes` in Go);
/// `None` for maps, lists and null.
pub(crate) fn plain_bytes(value: &Value) -> Option<Cow<'_, [u8]>> {
    Some(match value {
        Value::Str(s) | Value::Time(s) | Value::Comment(s) | Value::LineComment(s) => {
            Cow::Borrowed(s.as_bytes())
        }
        Value::Bytes(b) => Cow::Borrowed(b.as_slice()),
        Value::Int(i) => Cow::Owned(i.to_string().into_bytes()),
        Value::Float(f) => Cow::Owned(gofmt::float_f(*f).into_bytes()),
        Value::Bool(true) => Cow::Borrowed(b"True"),
        Value::Bool(false) => Cow::Borrowed(b"False"),
        Value::Null | Value::Map(_) | Value::List(_) => return None,
    })
}

/// The Go type name sops prints for a value (`%T`).
pub(crate) fn go_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Int(_) => "int",
        Value::Float(_) => "float64",
        Value::Str(_) => "string",
        Value::Time(_) => "time.Time",
        Value::Bytes(_) => "[]uint8",
        Value::Comment(_) | Value::LineComment(_) => "sops.Comment",
        Value::Map(_) => "sops.TreeBranch",
        Value::List(_) => "[]interface {}",
    }
}

/// Encrypts a scalar as sops does (random 32-byte IV). Empty strings and comments stay `""`.
/// For building test documents and benchmarks; decryption never needs it.
pub fn encrypt(value: &Value, key: &[u8; 32], ad: &str) -> Result<String, CipherError> {
    let datatype = match value {
        Value::Str(_) | Value::Bytes(_) => "str",
        Value::Int(_) => "int",
        Value::Float(_) => "float",
        Value::Bool(_) => "bool",
        Value::Time(_) => "time",
        Value::Comment(_) | Value::LineComment(_) => "comment",
        other => return Err(CipherError::Unsupported(go_type(other))),
    };
    let plain = plain_bytes(value).ok_or(CipherError::Unsupported(go_type(value)))?;
    if plain.is_empty() && !matches!(value, Value::Int(_) | Value::Float(_) | Value::Bool(_)) {
        return Ok(String::new());
    }
    let cipher = AesGcm::<Aes256, U32>::new(GenericArray::from_slice(key));
    let iv = AesGcm::<Aes256, U32>::generate_nonce(&mut OsRng);
    let sealed = cipher
        .encrypt(
            &iv,
            Payload {
                msg: &plain,
                aad: ad.as_bytes(),
            },
        )
        .map_err(|_| CipherError::Auth)?;
    let (data, tag) = sealed.split_at(sealed.len().saturating_sub(16));
    let b64 = &base64::engine::general_purpose::STANDARD;
    Ok(format!(
        "ENC[AES256_GCM,data:{},iv:{},tag:{},type:{datatype}]",
        b64.encode(data),
        b64.encode(iv),
        b64.encode(tag)
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const KEY: [u8; 32] = [7u8; 32];

    #[test]
    fn round_trip_every_type() {
        for v in [
            Value::Str("héllo\nworld".into()),
            Value::Int(-42),
            Value::Float(1.5),
            Value::Float(1e21),
            Value::Bool(true),
            Value::Bool(false),
            Value::Time("2024-01-01T00:00:00.5+02:00".into()),
            Value::Comment(" a comment".into()),
            Value::Bytes(vec![0xff, 0x00, 0x80]),
        ] {
            let enc = encrypt(&v, &KEY, "data:x:").unwrap();
            assert!(enc.starts_with("ENC[AES256_GCM,data:"), "{enc}");
            assert!(is_encrypted(&enc));
            assert_eq!(decrypt(&enc, &KEY, "data:x:").unwrap(), v);
            // Another path (additional data) or another key fails authentication.
            assert_eq!(decrypt(&enc, &KEY, "data:y:"), Err(CipherError::Auth));
            assert_eq!(decrypt(&enc, &[8u8; 32], "data:x:"), Err(CipherError::Auth));
        }
    }

    #[test]
    fn empty_values_and_bad_forms() {
        assert_eq!(encrypt(&Value::Str(String::new()), &KEY, "a:").unwrap(), "");
        assert_eq!(decrypt("", &KEY, "a:").unwrap(), Value::Str(String::new()));
        assert_eq!(decrypt("plain", &KEY, "a:"), Err(CipherError::Format));
        assert_eq!(
            decrypt(
                "ENC[AES256_GCM,data:!!,iv:AA==,tag:AA==,type:str]",
                &KEY,
                "a:"
            ),
            Err(CipherError::Base64("data"))
        );
        let enc = encrypt(&Value::Str("x".into()), &KEY, "a:").unwrap();
        let odd = enc.replace("type:str", "type:weird");
        assert_eq!(
            decrypt(&odd, &KEY, "a:"),
            Err(CipherError::UnknownType("weird".into()))
        );
        // Trailing text after `]` is tolerated, as by sops' regex.
        assert_eq!(
            decrypt(&format!("{enc} trailing"), &KEY, "a:").unwrap(),
            Value::Str("x".into())
        );
    }

    #[test]
    fn typed_plaintexts_like_go() {
        assert_eq!(typed(b"T", "bool").unwrap(), Value::Bool(true));
        assert_eq!(typed(b"1000", "float").unwrap(), Value::Float(1000.0));
        assert_eq!(typed(b"4.2", "int"), Err(CipherError::BadTyped("int")));
        assert_eq!(
            typed(b"2024-01-01T00:00:00.000Z", "time").unwrap(),
            Value::Time("2024-01-01T00:00:00Z".into())
        );
        assert_eq!(typed(b"\xff", "str").unwrap(), Value::Bytes(vec![0xff]));
    }

    #[test]
    fn go_base64_tolerates_line_breaks() {
        assert_eq!(go_base64("YW\r\nJj").unwrap(), b"abc");
        assert_eq!(go_base64("YWJ"), None);
        // Non-zero trailing bits, accepted by Go's non-strict decoder.
        assert_eq!(go_base64("YR==").unwrap(), b"a");
    }
}
