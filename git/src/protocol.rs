//! Upload-pack conversations: protocol v2 (`ls-refs`, `fetch`) and v0/v1
//! (ref advertisement, then want/deepen/done), plus side-band demultiplexing.

use std::collections::HashMap;

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::error::GitError;
use crate::oid::ObjectId;
use crate::pktline::{self, Pkt, PktReader, SectionLimits};

/// Value sent as `agent=` when the server advertises the capability.
pub const AGENT: &str = concat!("rflux-git/", env!("CARGO_PKG_VERSION"));

/// A ref as the remote reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteRef {
    /// Full name, e.g. `refs/heads/main`, `refs/tags/v1.0.0`, `HEAD`.
    pub name: String,
    /// What the ref points at (for an annotated tag: the tag object).
    pub oid: ObjectId,
    /// For annotated tags: the object the tag (chain) finally points at.
    pub peeled: Option<ObjectId>,
    /// For symbolic refs (e.g. `HEAD`): the ref they point at.
    pub symref_target: Option<String>,
}

impl RemoteRef {
    /// The commit this ref resolves to: the peeled id for annotated tags, the id otherwise.
    pub fn target(&self) -> ObjectId {
        self.peeled.unwrap_or(self.oid)
    }
}

/// What the server said first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Advertisement {
    /// Protocol v2 capability advertisement (one capability per entry, `key[=value]`).
    V2 { caps: Vec<String> },
    /// Protocol v0/v1 ref advertisement with the capabilities of its first line.
    V0 {
        refs: Vec<RemoteRef>,
        caps: Vec<String>,
    },
}

impl Advertisement {
    pub fn version(&self) -> u8 {
        match self {
            Advertisement::V2 { .. } => 2,
            Advertisement::V0 { .. } => 0,
        }
    }

    pub fn caps(&self) -> &[String] {
        match self {
            Advertisement::V2 { caps } | Advertisement::V0 { caps, .. } => caps,
        }
    }

    /// Whether capability `name` (as `name` or `name=...`) is advertised.
    pub fn has_cap(&self, name: &str) -> bool {
        self.cap_value(name).is_some()
    }

    /// The value of capability `name` (`""` when it has none).
    pub fn cap_value(&self, name: &str) -> Option<&str> {
        self.caps().iter().find_map(|c| {
            if c == name {
                Some("")
            } else {
                c.strip_prefix(name).and_then(|r| r.strip_prefix('='))
            }
        })
    }

    /// v2: whether the `fetch` command advertises `feature` (e.g. `shallow`).
    pub fn fetch_feature(&self, feature: &str) -> bool {
        self.cap_value("fetch")
            .is_some_and(|v| v.split(' ').any(|f| f == feature))
    }

    /// Fails for object formats other than SHA-1.
    pub fn check_object_format(&self) -> Result<(), GitError> {
        match self.cap_value("object-format") {
            None | Some("sha1") => Ok(()),
            Some(other) => Err(GitError::protocol(format!(
                "the remote uses object format {other:?}; only sha1 is supported"
            ))),
        }
    }
}

fn text(p: &[u8]) -> String {
    String::from_utf8_lossy(p).into_owned()
}

/// Maps an `ERR` line to an error.
pub(crate) fn remote_error(msg: &str) -> GitError {
    let lower = msg.to_ascii_lowercase();
    if lower.contains("not our ref")
        || lower.contains("not found")
        || lower.contains("no such")
        || lower.contains("does not appear to be a git repository")
        || lower.contains("not a git repository")
    {
        GitError::NotFound(msg.to_string())
    } else if lower.contains("denied") || lower.contains("unauthorized") {
        GitError::Auth(msg.to_string())
    } else {
        GitError::Remote(msg.to_string())
    }
}

fn check_err(line: &[u8]) -> Result<(), GitError> {
    if let Some(msg) = line.strip_prefix(b"ERR ") {
        return Err(remote_error(text(msg).trim_end()));
    }
    Ok(())
}

/// Reads the advertisement that starts a connection, within the reader's section limits.
/// The `# service=git-upload-pack` line and flush that start a smart HTTP v0 answer are
/// skipped.
pub async fn read_advertisement<R: AsyncRead + Unpin>(
    r: &mut PktReader<R>,
) -> Result<Advertisement, GitError> {
    r.begin_section("ref advertisement");
    let mut first = r.read_required().await?;
    if first.text().is_some_and(|t| t.starts_with(b"# service=")) {
        if r.read_required().await? != Pkt::Flush {
            return Err(GitError::protocol("service line not followed by a flush"));
        }
        first = r.read_required().await?;
    }
    if first.text() == Some(b"version 1") {
        first = r.read_required().await?;
    }
    if first.text() == Some(b"version 2") {
        r.begin_section("capability advertisement");
        let mut caps = Vec::new();
        loop {
            match r.read_required().await? {
                Pkt::Flush => break,
                Pkt::Data(d) => {
                    let line = d.strip_suffix(b"\n").unwrap_or(&d);
                    check_err(line)?;
                    caps.push(text(line));
                }
                other => {
                    return Err(GitError::protocol(format!(
                        "unexpected {other:?} in capability advertisement"
                    )));
                }
            }
        }
        return Ok(Advertisement::V2 { caps });
    }
    let mut refs: Vec<RemoteRef> = Vec::new();
    let mut caps: Vec<String> = Vec::new();
    let mut pkt = first;
    let mut first_line = true;
    loop {
        match pkt {
            Pkt::Flush => break,
            Pkt::Data(d) => {
                let line = d.strip_suffix(b"\n").unwrap_or(&d);
                check_err(line)?;
                let line = if first_line {
                    first_line = false;
                    match line.iter().position(|&b| b == 0) {
                        Some(nul) => {
                            caps = text(&line[nul + 1..])
                                .split(' ')
                                .filter(|s| !s.is_empty())
                                .map(str::to_string)
                                .collect();
                            &line[..nul]
                        }
                        None => line,
                    }
                } else {
                    line
                };
                let (oid, name) = parse_ref_line(line)?;
                if name == "capabilities^{}" {
                    // Empty repository: only capabilities.
                } else if let Some(base) = name.strip_suffix("^{}") {
                    // The peeled line follows its tag directly; looking further back would
                    // make a hostile advertisement quadratic.
                    if let Some(r) = refs.last_mut().filter(|r| r.name == base) {
                        r.peeled = Some(oid);
                    }
                } else {
                    refs.push(RemoteRef {
                        name: name.to_string(),
                        oid,
                        peeled: None,
                        symref_target: None,
                    });
                }
            }
            other => {
                return Err(GitError::protocol(format!(
                    "unexpected {other:?} in ref advertisement"
                )));
            }
        }
        pkt = r.read_required().await?;
    }
    let symrefs: HashMap<&str, &str> = caps
        .iter()
        .filter_map(|c| c.strip_prefix("symref=").and_then(|s| s.split_once(':')))
        .collect();
    if !symrefs.is_empty() {
        for r in &mut refs {
            if let Some(to) = symrefs.get(r.name.as_str()) {
                r.symref_target = Some((*to).to_string());
            }
        }
    }
    Ok(Advertisement::V0 { refs, caps })
}

fn parse_ref_line(line: &[u8]) -> Result<(ObjectId, &str), GitError> {
    let sp = line
        .iter()
        .position(|&b| b == b' ')
        .ok_or_else(|| GitError::protocol("ref line without a space"))?;
    let oid = ObjectId::from_hex(&line[..sp])?;
    let name = std::str::from_utf8(&line[sp + 1..])
        .map_err(|_| GitError::protocol("ref name is not UTF-8"))?;
    Ok((oid, name))
}

fn v2_command(adv: &Advertisement, command: &str) -> Result<Vec<u8>, GitError> {
    let mut out = Vec::new();
    pktline::write_line(&mut out, &format!("command={command}"))?;
    if adv.has_cap("agent") {
        pktline::write_line(&mut out, &format!("agent={AGENT}"))?;
    }
    if adv.has_cap("object-format") {
        pktline::write_line(&mut out, "object-format=sha1")?;
    }
    pktline::write_delim(&mut out);
    Ok(out)
}

/// The v2 `ls-refs` request.
pub fn ls_refs_request(adv: &Advertisement, prefixes: &[&str]) -> Result<Vec<u8>, GitError> {
    let mut out = v2_command(adv, "ls-refs")?;
    pktline::write_line(&mut out, "peel")?;
    pktline::write_line(&mut out, "symrefs")?;
    for p in prefixes {
        pktline::write_line(&mut out, &format!("ref-prefix {p}"))?;
    }
    pktline::write_flush(&mut out);
    Ok(out)
}

/// Parses a v2 `ls-refs` response, within the reader's section limits.
pub async fn read_ls_refs<R: AsyncRead + Unpin>(
    r: &mut PktReader<R>,
) -> Result<Vec<RemoteRef>, GitError> {
    r.begin_section("ls-refs response");
    let mut refs = Vec::new();
    loop {
        match r.read_required().await? {
            Pkt::Flush => return Ok(refs),
            Pkt::Data(d) => {
                let line = d.strip_suffix(b"\n").unwrap_or(&d);
                check_err(line)?;
                let s = std::str::from_utf8(line)
                    .map_err(|_| GitError::protocol("ls-refs line is not UTF-8"))?;
                let mut parts = s.split(' ');
                let oid_s = parts.next().unwrap_or_default();
                if oid_s == "unborn" {
                    continue;
                }
                let oid = ObjectId::from_hex(oid_s.as_bytes())?;
                let name = parts
                    .next()
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| GitError::protocol("ls-refs line without a name"))?;
                let mut rr = RemoteRef {
                    name: name.to_string(),
                    oid,
                    peeled: None,
                    symref_target: None,
                };
                for attr in parts {
                    if let Some(t) = attr.strip_prefix("symref-target:") {
                        rr.symref_target = Some(t.to_string());
                    } else if let Some(p) = attr.strip_prefix("peeled:") {
                        rr.peeled = Some(ObjectId::from_hex(p.as_bytes())?);
                    }
                }
                refs.push(rr);
            }
            other => {
                return Err(GitError::protocol(format!(
                    "unexpected {other:?} in ls-refs response"
                )));
            }
        }
    }
}

/// Filters a v0 advertisement like `ls-refs` with `ref-prefix` would.
pub fn filter_refs(refs: &[RemoteRef], prefixes: &[&str]) -> Vec<RemoteRef> {
    refs.iter()
        .filter(|r| prefixes.is_empty() || prefixes.iter().any(|p| r.name.starts_with(p)))
        .cloned()
        .collect()
}

/// The v2 `fetch` request for one object, depth 1 when the server supports shallow.
pub fn fetch_request_v2(adv: &Advertisement, want: &ObjectId) -> Result<Vec<u8>, GitError> {
    let mut out = v2_command(adv, "fetch")?;
    pktline::write_line(&mut out, "no-progress")?;
    pktline::write_line(&mut out, "ofs-delta")?;
    if adv.fetch_feature("shallow") {
        pktline::write_line(&mut out, "deepen 1")?;
    }
    pktline::write_line(&mut out, &format!("want {want}"))?;
    pktline::write_line(&mut out, "done")?;
    pktline::write_flush(&mut out);
    Ok(out)
}

/// The v0 request for one object (stateless-rpc shape, valid on stateful connections too).
pub fn fetch_request_v0(adv: &Advertisement, want: &ObjectId) -> Result<Vec<u8>, GitError> {
    let mut caps: Vec<String> = Vec::new();
    if adv.has_cap("side-band-64k") {
        caps.push("side-band-64k".into());
    } else if adv.has_cap("side-band") {
        caps.push("side-band".into());
    }
    for c in ["ofs-delta", "no-progress", "shallow"] {
        if adv.has_cap(c) {
            caps.push(c.into());
        }
    }
    if adv.has_cap("agent") {
        caps.push(format!("agent={AGENT}"));
    }
    let mut out = Vec::new();
    pktline::write_line(&mut out, &format!("want {want} {}", caps.join(" ")))?;
    if adv.has_cap("shallow") {
        pktline::write_line(&mut out, "deepen 1")?;
    }
    pktline::write_flush(&mut out);
    pktline::write_line(&mut out, "done")?;
    Ok(out)
}

/// What a fetch returned.
#[derive(Debug, Default)]
pub struct FetchResponse {
    pub pack: Vec<u8>,
    /// Commits the server marked shallow.
    pub shallow: Vec<ObjectId>,
}

fn shallow_line(line: &[u8], out: &mut Vec<ObjectId>) -> Result<bool, GitError> {
    if let Some(h) = line.strip_prefix(b"shallow ") {
        out.push(ObjectId::from_hex(h)?);
        Ok(true)
    } else {
        Ok(line.starts_with(b"unshallow "))
    }
}

/// Parses a v2 `fetch` response: the sections before the pack within the reader's section
/// limits, then a pack of at most `max_pack` bytes.
pub async fn read_fetch_v2<R: AsyncRead + Unpin>(
    r: &mut PktReader<R>,
    max_pack: u64,
) -> Result<FetchResponse, GitError> {
    r.begin_section("fetch response before the pack");
    let mut resp = FetchResponse::default();
    loop {
        let header = match r.read_required().await? {
            Pkt::Data(d) => d,
            Pkt::Flush => {
                return Err(GitError::protocol(
                    "fetch response ended without a packfile",
                ));
            }
            other => {
                return Err(GitError::protocol(format!(
                    "unexpected {other:?} where a fetch section header was expected"
                )));
            }
        };
        let header = header.strip_suffix(b"\n").unwrap_or(&header);
        check_err(header)?;
        match header {
            b"packfile" => {
                resp.pack = read_sideband(r, max_pack).await?;
                return Ok(resp);
            }
            b"shallow-info" | b"acknowledgments" | b"wanted-refs" | b"packfile-uris" => {
                let is_shallow = header == b"shallow-info";
                loop {
                    match r.read_required().await? {
                        Pkt::Delim => break,
                        Pkt::Flush => {
                            return Err(GitError::protocol(
                                "fetch response ended without a packfile",
                            ));
                        }
                        Pkt::Data(d) => {
                            let line = d.strip_suffix(b"\n").unwrap_or(&d);
                            check_err(line)?;
                            if is_shallow {
                                shallow_line(line, &mut resp.shallow)?;
                            }
                        }
                        Pkt::ResponseEnd => {
                            return Err(GitError::protocol("unexpected response-end in fetch"));
                        }
                    }
                }
            }
            other => {
                return Err(GitError::protocol(format!(
                    "unknown fetch section {:?}",
                    text(other)
                )));
            }
        }
    }
}

/// Parses a v0 fetch response (shallow lines, NAK/ACK within the reader's section limits,
/// then a pack of at most `max_pack` bytes).
pub async fn read_fetch_v0<R: AsyncRead + Unpin>(
    mut r: PktReader<R>,
    adv: &Advertisement,
    max_pack: u64,
) -> Result<FetchResponse, GitError> {
    r.begin_section("fetch response before the pack");
    let mut resp = FetchResponse::default();
    loop {
        match r.read_required().await? {
            Pkt::Flush => continue,
            Pkt::Data(d) => {
                let line = d.strip_suffix(b"\n").unwrap_or(&d);
                check_err(line)?;
                if shallow_line(line, &mut resp.shallow)? {
                    continue;
                }
                if line == b"NAK" || (line.starts_with(b"ACK ") && !line.ends_with(b"continue")) {
                    break;
                }
                if line.starts_with(b"ACK ") {
                    continue;
                }
                return Err(GitError::protocol(format!(
                    "unexpected line {:?} before the pack",
                    text(&line[..line.len().min(80)])
                )));
            }
            other => {
                return Err(GitError::protocol(format!(
                    "unexpected {other:?} before the pack"
                )));
            }
        }
    }
    if adv.has_cap("side-band-64k") || adv.has_cap("side-band") {
        resp.pack = read_sideband(&mut r, max_pack).await?;
    } else {
        let mut inner = r.into_inner();
        let mut pack = Vec::new();
        (&mut inner)
            .take(max_pack.saturating_add(1))
            .read_to_end(&mut pack)
            .await
            .map_err(|e| GitError::io("reading pack", e))?;
        if pack.len() as u64 > max_pack {
            return Err(pack_limit(max_pack));
        }
        resp.pack = pack;
    }
    Ok(resp)
}

fn pack_limit(max: u64) -> GitError {
    GitError::Limit(format!("pack exceeds the limit of {max} bytes"))
}

/// Demultiplexes side-band packets until a flush (or end of stream):
/// band 1 is pack data (at most `max_pack` bytes), band 2 progress (logged), band 3 a fatal
/// error. Framing and progress may add the reader's section byte limit to `max_pack`.
pub async fn read_sideband<R: AsyncRead + Unpin>(
    r: &mut PktReader<R>,
    max_pack: u64,
) -> Result<Vec<u8>, GitError> {
    let extra = r.limits().max_bytes;
    r.begin_section_with(
        "side-band pack stream",
        SectionLimits {
            max_bytes: max_pack.saturating_add(extra),
            // Bounded by the bytes: every packet takes at least 4.
            max_pkts: u64::MAX,
        },
    );
    let mut pack = Vec::new();
    loop {
        match r.read().await? {
            None | Some(Pkt::Flush) => return Ok(pack),
            Some(Pkt::Data(d)) => match d.split_first() {
                Some((1, data)) => {
                    if pack.len().saturating_add(data.len()) as u64 > max_pack {
                        return Err(pack_limit(max_pack));
                    }
                    pack.extend_from_slice(data);
                }
                Some((2, msg)) => {
                    tracing::debug!(target: "rflux_git", "remote: {}", text(msg).trim_end());
                }
                Some((3, msg)) => return Err(remote_error(text(msg).trim_end())),
                _ => {
                    let line = d.strip_suffix(b"\n").unwrap_or(&d);
                    check_err(line)?;
                    return Err(GitError::protocol("invalid side-band channel"));
                }
            },
            Some(other) => {
                return Err(GitError::protocol(format!(
                    "unexpected {other:?} in side-band stream"
                )));
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pkts(lines: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for l in lines {
            match *l {
                b"0000" => pktline::write_flush(&mut out),
                b"0001" => pktline::write_delim(&mut out),
                d => pktline::write_data(&mut out, d).unwrap(),
            }
        }
        out
    }

    const A: &str = "1111111111111111111111111111111111111111";
    const B: &str = "2222222222222222222222222222222222222222";

    #[tokio::test]
    async fn parses_v0_advertisement_with_peeled_and_symref() {
        let first = format!(
            "{A} HEAD\0multi_ack side-band-64k shallow symref=HEAD:refs/heads/main agent=git/2\n"
        );
        let buf = pkts(&[
            first.as_bytes(),
            format!("{A} refs/heads/main\n").as_bytes(),
            format!("{A} refs/tags/v1\n").as_bytes(),
            format!("{B} refs/tags/v1^{{}}\n").as_bytes(),
            b"0000",
        ]);
        let adv = read_advertisement(&mut PktReader::new(&buf[..]))
            .await
            .unwrap();
        assert_eq!(adv.version(), 0);
        assert!(adv.has_cap("shallow") && adv.has_cap("agent") && !adv.has_cap("ofs-delta"));
        let Advertisement::V0 { refs, .. } = &adv else {
            panic!("not v0")
        };
        assert_eq!(refs.len(), 3);
        assert_eq!(refs[0].symref_target.as_deref(), Some("refs/heads/main"));
        assert_eq!(refs[2].peeled.unwrap().to_hex(), B);
        assert_eq!(refs[2].target().to_hex(), B);
        assert_eq!(filter_refs(refs, &["refs/tags/"]).len(), 1);

        let req = fetch_request_v0(&adv, &A.parse().unwrap()).unwrap();
        let s = String::from_utf8(req).unwrap();
        assert!(s.contains(&format!("want {A} side-band-64k shallow agent=")));
        assert!(s.contains("deepen 1\n0000") && s.ends_with("0009done\n"));
    }

    #[tokio::test]
    async fn parses_v2_caps_and_ls_refs() {
        let buf = pkts(&[
            b"version 2\n",
            b"agent=git/2.39\n",
            b"ls-refs=unborn\n",
            b"fetch=shallow wait-for-done\n",
            b"object-format=sha1\n",
            b"0000",
        ]);
        let adv = read_advertisement(&mut PktReader::new(&buf[..]))
            .await
            .unwrap();
        assert_eq!(adv.version(), 2);
        assert!(adv.fetch_feature("shallow") && !adv.fetch_feature("filter"));
        adv.check_object_format().unwrap();
        let req = String::from_utf8(ls_refs_request(&adv, &["refs/heads/"]).unwrap()).unwrap();
        assert!(req.starts_with("0014command=ls-refs\n"));
        assert!(
            req.contains("object-format=sha1\n0001")
                && req.ends_with("ref-prefix refs/heads/\n0000")
        );

        let resp = pkts(&[
            format!("{A} HEAD symref-target:refs/heads/main\n").as_bytes(),
            format!("{A} refs/tags/v1 peeled:{B}\n").as_bytes(),
            b"0000",
        ]);
        let refs = read_ls_refs(&mut PktReader::new(&resp[..])).await.unwrap();
        assert_eq!(refs[0].symref_target.as_deref(), Some("refs/heads/main"));
        assert_eq!(refs[1].peeled.unwrap().to_hex(), B);
    }

    #[tokio::test]
    async fn v2_fetch_demuxes_sideband_and_reports_errors() {
        let resp = pkts(&[
            b"shallow-info\n",
            format!("shallow {A}\n").as_bytes(),
            b"0001",
            b"packfile\n",
            b"\x02progress\n",
            b"\x01PACK",
            b"\x01rest",
            b"0000",
        ]);
        let got = read_fetch_v2(&mut PktReader::new(&resp[..]), 100)
            .await
            .unwrap();
        assert_eq!(got.pack, b"PACKrest");
        assert_eq!(got.shallow[0].to_hex(), A);
        assert!(matches!(
            read_fetch_v2(&mut PktReader::new(&resp[..]), 5).await,
            Err(GitError::Limit(_))
        ));

        let err = pkts(&[b"packfile\n", b"\x03fatal: boom\n", b"0000"]);
        assert!(matches!(
            read_fetch_v2(&mut PktReader::new(&err[..]), 100).await,
            Err(GitError::Remote(m)) if m == "fatal: boom"
        ));
        let err = pkts(&[b"ERR upload-pack: not our ref 1234\n"]);
        assert!(matches!(
            read_fetch_v2(&mut PktReader::new(&err[..]), 100).await,
            Err(GitError::NotFound(_))
        ));
        let trunc = pkts(&[b"shallow-info\n"]);
        assert!(
            read_fetch_v2(&mut PktReader::new(&trunc[..]), 100)
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn v0_fetch_response() {
        let adv = Advertisement::V0 {
            refs: vec![],
            caps: vec!["side-band-64k".into()],
        };
        let resp = pkts(&[
            format!("shallow {A}\n").as_bytes(),
            b"0000",
            b"NAK\n",
            b"\x01PA",
            b"\x01CK",
            b"0000",
        ]);
        let got = read_fetch_v0(PktReader::new(&resp[..]), &adv, 100)
            .await
            .unwrap();
        assert_eq!(got.pack, b"PACK");
        assert_eq!(got.shallow.len(), 1);

        let raw_adv = Advertisement::V0 {
            refs: vec![],
            caps: vec![],
        };
        let mut resp = pkts(&[b"NAK\n"]);
        resp.extend_from_slice(b"PACKDATA");
        let got = read_fetch_v0(PktReader::new(&resp[..]), &raw_adv, 100)
            .await
            .unwrap();
        assert_eq!(got.pack, b"PACKDATA");
        let bad = pkts(&[b"garbage\n"]);
        assert!(
            read_fetch_v0(PktReader::new(&bad[..]), &adv, 100)
                .await
                .is_err()
        );
    }
}
