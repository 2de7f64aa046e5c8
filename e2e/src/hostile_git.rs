//! Small hostile git smart-HTTP servers for the fault-injection tests (issue 14): a port that
//! refuses connections, a server that accepts and never answers, one that answers garbage, one
//! whose ref advertisement never ends, and one that serves a delta-bomb pack (a pack of a few
//! kilobytes whose deltas resolve to gigabytes).
//!
//! Each server is plain blocking std networking on its own threads, so it keeps misbehaving
//! whatever the test's async runtime does. [`HostileGit::url`] gives the URL to put in a
//! GitRepository; dropping the handle stops the server and closes every connection it holds.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;
use rand::{Rng, SeedableRng};

/// How a [`HostileGit`] server misbehaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behavior {
    /// Nothing listens on the port: connections are refused.
    Down,
    /// Connections are accepted, the request is read, and nothing is ever sent back.
    Hang,
    /// `200 OK` with a git content type and a body of random bytes.
    Garbage,
    /// A v0 ref advertisement that never ends (a new `refs/heads/…` line forever).
    EndlessRefs,
    /// A valid v0 advertisement of one branch; the fetch answers a pack whose deltas double a
    /// 1 KiB blob `steps` times, then `fanout` deltas that each copy the largest object once
    /// more (behind a distinct prefix, so every result is a distinct object of the same size).
    DeltaBomb { steps: u32, fanout: u32 },
}

/// The commit the hostile advertisements claim `main` points to.
pub const FAKE_COMMIT: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

const ADV_TYPE: &str = "application/x-git-upload-pack-advertisement";
const RESULT_TYPE: &str = "application/x-git-upload-pack-result";

/// Counters of what a server saw and sent.
#[derive(Debug, Default)]
pub struct Stats {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// HTTP requests whose head was read.
    pub requests: AtomicU64,
    /// Response bytes written.
    pub bytes_sent: AtomicU64,
}

/// A running hostile server; stopped on drop.
pub struct HostileGit {
    addr: SocketAddr,
    behavior: Behavior,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    acceptor: Option<JoinHandle<()>>,
    pack_len: usize,
}

impl HostileGit {
    /// Starts a server with `behavior` on a loopback port.
    pub fn start(behavior: Behavior) -> anyhow::Result<HostileGit> {
        let listener = TcpListener::bind("127.0.0.1:0").context("binding a loopback port")?;
        let addr = listener.local_addr()?;
        let stats = Arc::new(Stats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let conns = Arc::new(Mutex::new(Vec::new()));
        let pack = match behavior {
            Behavior::DeltaBomb { steps, fanout } => delta_bomb_pack(steps, fanout),
            _ => Vec::new(),
        };
        let pack_len = pack.len();
        let acceptor = if behavior == Behavior::Down {
            // Closing the listener leaves a port nobody listens on: connections are refused.
            drop(listener);
            None
        } else {
            let (stats, stop, conns) = (stats.clone(), stop.clone(), conns.clone());
            let pack = Arc::new(pack);
            Some(std::thread::spawn(move || {
                accept_loop(&listener, behavior, &stats, &stop, &conns, &pack);
            }))
        };
        Ok(HostileGit {
            addr,
            behavior,
            stats,
            stop,
            conns,
            acceptor,
            pack_len,
        })
    }

    /// `http://<addr>/<repo>.git`.
    pub fn url(&self, repo: &str) -> String {
        format!("http://{}/{repo}.git", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn behavior(&self) -> Behavior {
        self.behavior
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Size of the delta-bomb pack served (0 for the other behaviors).
    pub fn pack_len(&self) -> usize {
        self.pack_len
    }

    /// Stops accepting and closes every held connection. Idempotent.
    pub fn stop(&mut self) {
        if self.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Ok(conns) = self.conns.lock() {
            for c in conns.iter() {
                let _ = c.shutdown(Shutdown::Both);
            }
        }
        // Wake the blocking accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

impl Drop for HostileGit {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(
    listener: &TcpListener,
    behavior: Behavior,
    stats: &Arc<Stats>,
    stop: &Arc<AtomicBool>,
    conns: &Arc<Mutex<Vec<TcpStream>>>,
    pack: &Arc<Vec<u8>>,
) {
    for sock in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(sock) = sock else { continue };
        stats.connections.fetch_add(1, Ordering::Relaxed);
        if let (Ok(mut held), Ok(clone)) = (conns.lock(), sock.try_clone()) {
            held.retain(|c: &TcpStream| c.peer_addr().is_ok());
            held.push(clone);
        }
        let (stats, stop, pack) = (stats.clone(), stop.clone(), pack.clone());
        std::thread::spawn(move || {
            let _ = serve_connection(sock, behavior, &stats, &stop, &pack);
        });
    }
}

/// Reads one request head (and its body, when it has a length or is chunked); `None` when the
/// peer closed or sent something unreadable.
fn read_request(sock: &mut TcpStream) -> Option<String> {
    let mut req = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        let n = sock.read(&mut buf).ok().filter(|&n| n > 0)?;
        req.extend_from_slice(&buf[..n]);
        if let Some(i) = req.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if req.len() > 1 << 20 {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&req[..head_end]).to_ascii_lowercase();
    let length: Option<usize> = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok());
    let chunked = head.contains("transfer-encoding: chunked");
    loop {
        let body = &req[head_end..];
        let done = match length {
            Some(len) => body.len() >= len,
            None if chunked => body.ends_with(b"0\r\n\r\n"),
            None => true,
        };
        if done || req.len() > 16 << 20 {
            return Some(head);
        }
        let n = sock.read(&mut buf).ok().filter(|&n| n > 0)?;
        req.extend_from_slice(&buf[..n]);
    }
}

fn serve_connection(
    mut sock: TcpStream,
    behavior: Behavior,
    stats: &Stats,
    stop: &AtomicBool,
    pack: &[u8],
) -> std::io::Result<()> {
    sock.set_read_timeout(Some(Duration::from_secs(120)))?;
    // Keep-alive: answer requests on this connection until the peer closes it.
    while let Some(head) = read_request(&mut sock) {
        stats.requests.fetch_add(1, Ordering::Relaxed);
        let is_get = head.starts_with("get ");
        match behavior {
            Behavior::Down => return Ok(()),
            Behavior::Hang => {
                while !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(100));
                }
                return Ok(());
            }
            Behavior::Garbage => {
                let mut rng = rand::rngs::StdRng::seed_from_u64(14);
                let body: Vec<u8> = (0..64 * 1024).map(|_| rng.random::<u8>()).collect();
                respond(&mut sock, stats, ADV_TYPE, &body)?;
            }
            Behavior::EndlessRefs => return endless_refs(&mut sock, stats, stop),
            Behavior::DeltaBomb { .. } => {
                if is_get {
                    respond(&mut sock, stats, ADV_TYPE, &one_branch_advertisement())?;
                } else {
                    let mut body = pkt(b"NAK\n");
                    body.extend_from_slice(pack);
                    respond(&mut sock, stats, RESULT_TYPE, &body)?;
                }
            }
        }
    }
    Ok(())
}

fn respond(sock: &mut TcpStream, stats: &Stats, ctype: &str, body: &[u8]) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\ncache-control: no-cache\r\n\r\n",
        body.len()
    );
    sock.write_all(head.as_bytes())?;
    sock.write_all(body)?;
    sock.flush()?;
    stats
        .bytes_sent
        .fetch_add((head.len() + body.len()) as u64, Ordering::Relaxed);
    Ok(())
}

/// A pkt-line carrying `data`.
pub fn pkt(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:04x}", data.len() + 4).into_bytes();
    out.extend_from_slice(data);
    out
}

fn service_header() -> Vec<u8> {
    let mut out = pkt(b"# service=git-upload-pack\n");
    out.extend_from_slice(b"0000");
    out
}

fn one_branch_advertisement() -> Vec<u8> {
    let mut out = service_header();
    out.extend(pkt(format!(
        "{FAKE_COMMIT} HEAD\0ofs-delta shallow no-progress symref=HEAD:refs/heads/main agent=hostile/1\n"
    )
    .as_bytes()));
    out.extend(pkt(format!("{FAKE_COMMIT} refs/heads/main\n").as_bytes()));
    out.extend_from_slice(b"0000");
    out
}

/// Writes a chunked advertisement whose ref lines never end, until the peer stops reading
/// or the server is stopped.
fn endless_refs(sock: &mut TcpStream, stats: &Stats, stop: &AtomicBool) -> std::io::Result<()> {
    sock.write_all(
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: {ADV_TYPE}\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        .as_bytes(),
    )?;
    let mut first = service_header();
    first.extend(pkt(format!(
        "{FAKE_COMMIT} HEAD\0ofs-delta shallow symref=HEAD:refs/heads/main agent=hostile/1\n"
    )
    .as_bytes()));
    let mut n: u64 = 0;
    let mut batch = first;
    while !stop.load(Ordering::SeqCst) {
        while batch.len() < 256 * 1024 {
            batch.extend(pkt(format!("{FAKE_COMMIT} refs/heads/b{n:09}\n").as_bytes()));
            n += 1;
        }
        let mut framed = format!("{:x}\r\n", batch.len()).into_bytes();
        framed.extend_from_slice(&batch);
        framed.extend_from_slice(b"\r\n");
        sock.write_all(&framed)?;
        stats
            .bytes_sent
            .fetch_add(framed.len() as u64, Ordering::Relaxed);
        batch.clear();
    }
    Ok(())
}

// ---- the delta-bomb pack (format: git's gitformat-pack documentation) ----

const BLOB: u8 = 3;
const OFS_DELTA: u8 = 6;

fn entry_header(ty: u8, size: u64) -> Vec<u8> {
    let mut out = vec![(ty << 4) | (size & 0x0f) as u8];
    let mut rest = size >> 4;
    while rest > 0 {
        if let Some(last) = out.last_mut() {
            *last |= 0x80;
        }
        out.push((rest & 0x7f) as u8);
        rest >>= 7;
    }
    out
}

/// The negative offset of an OFS_DELTA base (base-128, big-endian, +1 per continuation).
fn ofs(mut rel: u64) -> Vec<u8> {
    let mut out = vec![(rel & 0x7f) as u8];
    rel >>= 7;
    while rel > 0 {
        rel -= 1;
        out.insert(0, 0x80 | (rel & 0x7f) as u8);
        rel >>= 7;
    }
    out
}

fn varint(mut n: u64, out: &mut Vec<u8>) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn copy_op(offset: u64, len: u64, out: &mut Vec<u8>) {
    let mut op = 0x80u8;
    let mut args = Vec::new();
    for i in 0..4 {
        let b = (offset >> (8 * i)) as u8;
        if b != 0 {
            op |= 1 << i;
            args.push(b);
        }
    }
    for i in 0..3 {
        let b = (len >> (8 * i)) as u8;
        if b != 0 {
            op |= 0x10 << i;
            args.push(b);
        }
    }
    out.push(op);
    out.extend_from_slice(&args);
}

/// A delta: `prefix` inserted (under 128 bytes), then `times` copies of the first `copy_len`
/// bytes of the base.
fn repeat_delta(base_len: u64, copy_len: u64, times: u64, prefix: &[u8]) -> Vec<u8> {
    let mut d = Vec::new();
    varint(base_len, &mut d);
    varint(prefix.len() as u64 + copy_len * times, &mut d);
    if !prefix.is_empty() {
        d.push(prefix.len() as u8);
        d.extend_from_slice(prefix);
    }
    const CHUNK: u64 = 8 << 20;
    for _ in 0..times {
        let mut off = 0;
        while off < copy_len {
            let len = CHUNK.min(copy_len - off);
            copy_op(off, len, &mut d);
            off += len;
        }
    }
    d
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    // Writing to a Vec cannot fail.
    let _ = z.write_all(data);
    z.finish().unwrap_or_default()
}

/// The delta-bomb pack of [`Behavior::DeltaBomb`] (trailer included). Its objects resolve to
/// `2^(steps+1)` KiB for the chain plus `fanout` more objects of the largest size
/// (`2^steps` KiB each, a distinct prefix then a copy of the largest).
pub fn delta_bomb_pack(steps: u32, fanout: u32) -> Vec<u8> {
    use sha1::Digest as _;
    let mut body = Vec::new();
    // An entry at `12 + body.len()`: its header then its zlib-compressed data.
    let entry = |body: &mut Vec<u8>, ty: u8, base_off: Option<u64>, data: &[u8]| {
        let here = 12 + body.len() as u64;
        let mut header = entry_header(ty, data.len() as u64);
        if let Some(base) = base_off {
            header.extend(ofs(here - base));
        }
        body.extend_from_slice(&header);
        body.extend_from_slice(&zlib(data));
        here
    };
    let mut top = entry(&mut body, BLOB, None, &[b'x'; 1024]);
    let mut size: u64 = 1024;
    for _ in 0..steps {
        top = entry(
            &mut body,
            OFS_DELTA,
            Some(top),
            &repeat_delta(size, size, 2, b""),
        );
        size *= 2;
    }
    for i in 0..fanout {
        let prefix = format!("fan-out {i}\n");
        entry(
            &mut body,
            OFS_DELTA,
            Some(top),
            &repeat_delta(size, size - prefix.len() as u64, 1, prefix.as_bytes()),
        );
    }
    let count = 1 + steps + fanout;
    let mut p = b"PACK".to_vec();
    p.extend_from_slice(&2u32.to_be_bytes());
    p.extend_from_slice(&count.to_be_bytes());
    p.extend_from_slice(&body);
    let digest = sha1::Sha1::digest(&p);
    p.extend_from_slice(&digest);
    p
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn delta_bomb_pack_is_tiny_and_well_formed() {
        let pack = delta_bomb_pack(19, 6);
        assert!(pack.len() < 16 * 1024, "{}", pack.len());
        assert_eq!(&pack[..4], b"PACK");
        assert_eq!(
            u32::from_be_bytes([pack[8], pack[9], pack[10], pack[11]]),
            26
        );
    }

    #[test]
    fn pkt_lines_carry_their_length() {
        assert_eq!(pkt(b"NAK\n"), b"0008NAK\n");
    }

    #[test]
    fn down_refuses_and_garbage_answers() {
        let down = HostileGit::start(Behavior::Down).unwrap();
        assert!(TcpStream::connect(down.addr()).is_err());
        let g = HostileGit::start(Behavior::Garbage).unwrap();
        let mut s = TcpStream::connect(g.addr()).unwrap();
        s.write_all(b"GET /x.git/info/refs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut head = [0u8; 15];
        s.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"HTTP/1.1 200 OK");
    }
}
