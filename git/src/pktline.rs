//! pkt-line framing (gitprotocol-common): a 4-hex-digit length prefix that
//! counts itself, plus the special packets flush (`0000`), delimiter (`0001`)
//! and response-end (`0002`).

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::error::GitError;

/// Largest pkt-line git allows (length prefix included).
pub const MAX_PKT_LEN: usize = 65520;
/// Largest payload of a data pkt-line.
pub const MAX_PKT_DATA: usize = MAX_PKT_LEN - 4;

/// One decoded packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pkt {
    /// `0000`
    Flush,
    /// `0001`
    Delim,
    /// `0002`
    ResponseEnd,
    /// Payload of a data packet.
    Data(Vec<u8>),
}

impl Pkt {
    /// The payload without one trailing `\n`, for text packets.
    pub fn text(&self) -> Option<&[u8]> {
        match self {
            Pkt::Data(d) => Some(d.strip_suffix(b"\n").unwrap_or(d)),
            _ => None,
        }
    }
}

/// Appends a data packet holding `data` to `out`.
pub fn write_data(out: &mut Vec<u8>, data: &[u8]) -> Result<(), GitError> {
    if data.len() > MAX_PKT_DATA {
        return Err(GitError::protocol(format!(
            "pkt-line payload of {} bytes exceeds {MAX_PKT_DATA}",
            data.len()
        )));
    }
    out.extend_from_slice(format!("{:04x}", data.len() + 4).as_bytes());
    out.extend_from_slice(data);
    Ok(())
}

/// Appends a text packet: `line` plus a trailing newline.
pub fn write_line(out: &mut Vec<u8>, line: &str) -> Result<(), GitError> {
    let mut v = Vec::with_capacity(line.len() + 1);
    v.extend_from_slice(line.as_bytes());
    v.push(b'\n');
    write_data(out, &v)
}

/// Appends a flush packet.
pub fn write_flush(out: &mut Vec<u8>) {
    out.extend_from_slice(b"0000");
}

/// Appends a delimiter packet.
pub fn write_delim(out: &mut Vec<u8>) {
    out.extend_from_slice(b"0001");
}

fn parse_len(h: &[u8; 4]) -> Result<usize, GitError> {
    let s = std::str::from_utf8(h).map_err(|_| bad_len(h))?;
    usize::from_str_radix(s, 16).map_err(|_| bad_len(h))
}

fn bad_len(h: &[u8]) -> GitError {
    GitError::protocol(format!(
        "invalid pkt-line length {:?}",
        String::from_utf8_lossy(h)
    ))
}

/// Decodes one packet from the start of `buf`; returns it and the bytes consumed,
/// or `None` when `buf` holds only part of a packet.
pub fn decode(buf: &[u8]) -> Result<Option<(Pkt, usize)>, GitError> {
    let Some(h) = buf.get(..4) else {
        return Ok(None);
    };
    let mut hdr = [0u8; 4];
    hdr.copy_from_slice(h);
    let len = parse_len(&hdr)?;
    match len {
        0 => Ok(Some((Pkt::Flush, 4))),
        1 => Ok(Some((Pkt::Delim, 4))),
        2 => Ok(Some((Pkt::ResponseEnd, 4))),
        3 => Err(bad_len(&hdr)),
        n if n > MAX_PKT_LEN => Err(bad_len(&hdr)),
        n => match buf.get(4..n) {
            Some(d) => Ok(Some((Pkt::Data(d.to_vec()), n))),
            None => Ok(None),
        },
    }
}

/// Reads packets from an async byte stream.
pub struct PktReader<R> {
    inner: R,
}

impl<R: AsyncRead + Unpin> PktReader<R> {
    pub fn new(inner: R) -> Self {
        PktReader { inner }
    }

    /// Reads the next packet. A clean end of stream before any byte of a packet
    /// yields `Ok(None)`; a truncated packet is an error.
    pub async fn read(&mut self) -> Result<Option<Pkt>, GitError> {
        let mut hdr = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            let n = self
                .inner
                .read(&mut hdr[got..])
                .await
                .map_err(|e| GitError::io("reading pkt-line", e))?;
            if n == 0 {
                if got == 0 {
                    return Ok(None);
                }
                return Err(GitError::protocol("stream ended inside a pkt-line header"));
            }
            got += n;
        }
        let len = parse_len(&hdr)?;
        match len {
            0 => Ok(Some(Pkt::Flush)),
            1 => Ok(Some(Pkt::Delim)),
            2 => Ok(Some(Pkt::ResponseEnd)),
            3 => Err(bad_len(&hdr)),
            n if n > MAX_PKT_LEN => Err(bad_len(&hdr)),
            n => {
                let mut data = vec![0u8; n - 4];
                self.inner.read_exact(&mut data).await.map_err(|e| {
                    if e.kind() == std::io::ErrorKind::UnexpectedEof {
                        GitError::protocol("stream ended inside a pkt-line")
                    } else {
                        GitError::io("reading pkt-line", e)
                    }
                })?;
                Ok(Some(Pkt::Data(data)))
            }
        }
    }

    /// Like [`Self::read`], but end of stream is a protocol error.
    pub async fn read_required(&mut self) -> Result<Pkt, GitError> {
        self.read()
            .await?
            .ok_or_else(|| GitError::protocol("unexpected end of stream"))
    }

    pub fn into_inner(self) -> R {
        self.inner
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn encodes_lines_and_specials() {
        let mut out = Vec::new();
        write_line(&mut out, "command=ls-refs").unwrap();
        write_delim(&mut out);
        write_data(&mut out, b"").unwrap();
        write_flush(&mut out);
        assert_eq!(out, b"0014command=ls-refs\n000100040000".to_vec());
    }

    #[test]
    fn rejects_oversized_payload() {
        let mut out = Vec::new();
        assert!(write_data(&mut out, &vec![b'x'; MAX_PKT_DATA]).is_ok());
        assert!(write_data(&mut out, &vec![b'x'; MAX_PKT_DATA + 1]).is_err());
    }

    #[test]
    fn decodes_sequence_and_partial() {
        let buf = b"0009hello0000000100020006a\n";
        let mut pos = 0;
        let mut got = Vec::new();
        while let Some((p, n)) = decode(&buf[pos..]).unwrap() {
            got.push(p);
            pos += n;
        }
        assert_eq!(pos, buf.len());
        assert_eq!(
            got,
            vec![
                Pkt::Data(b"hello".to_vec()),
                Pkt::Flush,
                Pkt::Delim,
                Pkt::ResponseEnd,
                Pkt::Data(b"a\n".to_vec())
            ]
        );
        assert_eq!(got[4].text(), Some(&b"a"[..]));
        assert_eq!(decode(b"000ahel").unwrap(), None);
        assert_eq!(decode(b"00").unwrap(), None);
    }

    #[test]
    fn rejects_bad_lengths() {
        assert!(decode(b"0003").is_err());
        assert!(decode(b"zzzz").is_err());
        assert!(decode(b"fff1").is_err());
    }

    #[tokio::test]
    async fn async_reader_handles_eof_and_truncation() {
        let mut r = PktReader::new(&b"0008abcd0000"[..]);
        assert_eq!(r.read().await.unwrap(), Some(Pkt::Data(b"abcd".to_vec())));
        assert_eq!(r.read().await.unwrap(), Some(Pkt::Flush));
        assert_eq!(r.read().await.unwrap(), None);

        let mut r = PktReader::new(&b"0010abc"[..]);
        assert!(matches!(r.read().await, Err(GitError::Protocol(_))));
        let mut r = PktReader::new(&b"00"[..]);
        assert!(matches!(r.read().await, Err(GitError::Protocol(_))));
    }
}
