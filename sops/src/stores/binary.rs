//! The binary store (reference §4): any file, kept whole as the string `data` of a JSON
//! envelope `{"data": "ENC[…]", "sops": {…}}`; plaintext output is the raw bytes.

use crate::error::SopsError;
use crate::tree::{Branch, Entry, Value};
use zeroize::Zeroizing;

/// Parses the JSON envelope (the JSON store's loader).
pub fn load(bytes: &[u8]) -> Result<(Vec<Branch>, Value), SopsError> {
    super::json::load(bytes)
}

/// The bytes of the `data` string of the only branch.
pub fn emit(branches: &[Branch]) -> Result<Zeroizing<Vec<u8>>, SopsError> {
    let fail = |why: &str| SopsError::Emit(format!("error emitting binary store: {why}"));
    let [branch] = branches else {
        return Err(fail("there must be exactly one tree branch"));
    };
    for entry in branch {
        if let Entry::Pair(k, v) = entry
            && k == "data"
        {
            return match v {
                Value::Str(s) => Ok(Zeroizing::new(s.as_bytes().to_vec())),
                Value::Bytes(b) => Ok(Zeroizing::new(b.clone())),
                _ => Err(fail("'data' key in tree does not have a string value")),
            };
        }
    }
    Err(fail("no binary data found in tree"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn emits_the_data_bytes() {
        let b = vec![vec![
            Entry::Comment("x".into()),
            Entry::Pair("data".into(), Value::Bytes(vec![0, 0xff])),
        ]];
        assert_eq!(emit(&b).unwrap().as_slice(), &[0, 0xff]);
        assert!(emit(&[]).is_err());
        assert!(emit(&[vec![Entry::Pair("data".into(), Value::Int(1))]]).is_err());
        assert!(emit(&[vec![Entry::Pair("other".into(), Value::Null)]]).is_err());
    }
}
