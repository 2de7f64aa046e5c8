//! pkt-line framing, as git's `gitprotocol-common` documentation describes it: a
//! 4-hex-digit length prefix that counts itself, plus the special packets flush (`0000`),
//! delimiter (`0001`) and response-end (`0002`).
//!
//! [`PktReader`] bounds what it reads: each section of a conversation (an advertisement, an
//! `ls-refs` response, what precedes a pack) may take only so many bytes and packets.

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::error::GitError;
use crate::limits::{DEFAULT_MAX_ADVERTISEMENT_BYTES, DEFAULT_MAX_ADVERTISEMENT_LINES, Limits};

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

/// The four length bytes come from the remote: escaped, so the message (which ends up in a
/// GitRepository condition) stays printable ASCII.
fn bad_len(h: &[u8]) -> GitError {
    GitError::protocol(format!("invalid pkt-line length \"{}\"", h.escape_ascii()))
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

/// A reader over any boxed byte stream (a transport's response).
pub(crate) type BoxReader<'a> = PktReader<Box<dyn AsyncRead + Unpin + Send + 'a>>;

/// How much one section of a pkt-line stream may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SectionLimits {
    /// Bytes, length prefixes included.
    pub max_bytes: u64,
    /// Packets, special packets (flush, delimiter, response-end) included.
    pub max_pkts: u64,
}

impl Default for SectionLimits {
    /// The default advertisement limits of [`Limits`].
    fn default() -> Self {
        SectionLimits {
            max_bytes: DEFAULT_MAX_ADVERTISEMENT_BYTES,
            max_pkts: u64::from(DEFAULT_MAX_ADVERTISEMENT_LINES),
        }
    }
}

impl From<&Limits> for SectionLimits {
    fn from(l: &Limits) -> Self {
        SectionLimits {
            max_bytes: l.max_advertisement_bytes,
            max_pkts: u64::from(l.max_advertisement_lines),
        }
    }
}

/// Reads packets from an async byte stream, counting them against the limits of the
/// current section (see [`Self::begin_section`]). Going over a limit is a
/// [`GitError::Limit`] naming the section; it is detected before the packet's payload is
/// read.
pub struct PktReader<R> {
    inner: R,
    /// Limits of a section started with [`Self::begin_section`].
    limits: SectionLimits,
    /// The current section: its name, limits and what it has taken so far.
    section: &'static str,
    current: SectionLimits,
    bytes: u64,
    pkts: u64,
}

impl<R: AsyncRead + Unpin> PktReader<R> {
    /// A reader with the default section limits ([`SectionLimits::default`]).
    pub fn new(inner: R) -> Self {
        Self::with_limits(inner, SectionLimits::default())
    }

    /// A reader whose sections may take at most `limits` each.
    pub fn with_limits(inner: R, limits: SectionLimits) -> Self {
        PktReader {
            inner,
            limits,
            section: "pkt-line stream",
            current: limits,
            bytes: 0,
            pkts: 0,
        }
    }

    /// The limits each section gets from [`Self::begin_section`].
    pub fn limits(&self) -> SectionLimits {
        self.limits
    }

    /// Starts counting a new section called `name` (used in errors) from zero.
    pub fn begin_section(&mut self, name: &'static str) {
        self.begin_section_with(name, self.limits);
    }

    /// Like [`Self::begin_section`], with other limits for this section only.
    pub fn begin_section_with(&mut self, name: &'static str, limits: SectionLimits) {
        self.section = name;
        self.current = limits;
        self.bytes = 0;
        self.pkts = 0;
    }

    /// Counts one packet of `len` bytes, before its payload is read.
    fn charge(&mut self, len: usize) -> Result<(), GitError> {
        self.pkts += 1;
        if self.pkts > self.current.max_pkts {
            return Err(GitError::Limit(format!(
                "{} exceeds the limit of {} pkt-lines",
                self.section, self.current.max_pkts
            )));
        }
        self.bytes = self.bytes.saturating_add(len as u64);
        if self.bytes > self.current.max_bytes {
            return Err(GitError::Limit(format!(
                "{} exceeds the limit of {} bytes",
                self.section, self.current.max_bytes
            )));
        }
        Ok(())
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
        if len == 3 || len > MAX_PKT_LEN {
            return Err(bad_len(&hdr));
        }
        self.charge(len.max(4))?;
        match len {
            0 => Ok(Some(Pkt::Flush)),
            1 => Ok(Some(Pkt::Delim)),
            2 => Ok(Some(Pkt::ResponseEnd)),
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
    fn invalid_lengths_are_reported_printable() {
        let err = decode(b"\xb3>\x00\n rest").unwrap_err().to_string();
        assert!(
            err.contains(r#"invalid pkt-line length "\xb3>\x00\n""#),
            "{err}"
        );
        assert!(err.is_ascii(), "{err}");
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
        let mut r = PktReader::new(&b"0003"[..]);
        assert!(matches!(r.read().await, Err(GitError::Protocol(_))));
        let mut r = PktReader::new(&b"00"[..]);
        assert!(matches!(r.read().await, Err(GitError::Protocol(_))));
    }

    #[tokio::test]
    async fn sections_are_bounded_by_bytes_and_packets() {
        let limits = SectionLimits {
            max_bytes: 20,
            max_pkts: 3,
        };
        // Three packets fit, the fourth does not.
        let mut r = PktReader::with_limits(&b"0000000000000000"[..], limits);
        r.begin_section("test section");
        for _ in 0..3 {
            assert_eq!(r.read().await.unwrap(), Some(Pkt::Flush));
        }
        let err = r.read().await.unwrap_err();
        assert!(
            matches!(&err, GitError::Limit(m) if m == "test section exceeds the limit of 3 pkt-lines"),
            "{err:?}"
        );
        // A new section starts from zero.
        r.begin_section("next");
        assert_eq!(r.read().await.unwrap(), None);
        // 12 + 12 bytes: the second packet goes over 20 bytes before its payload is read.
        let mut r = PktReader::with_limits(&b"000cabcdefgh000cabcdefgh"[..], limits);
        r.begin_section("bytes");
        assert!(r.read().await.is_ok());
        assert!(matches!(r.read().await, Err(GitError::Limit(m)) if m.contains("20 bytes")));
        // Per-section override.
        let mut r = PktReader::new(&b"000cabcdefgh"[..]);
        r.begin_section_with(
            "tiny",
            SectionLimits {
                max_bytes: 4,
                max_pkts: 10,
            },
        );
        assert!(matches!(r.read().await, Err(GitError::Limit(_))));
        assert_eq!(PktReader::new(&b""[..]).limits(), SectionLimits::default());
    }
}
