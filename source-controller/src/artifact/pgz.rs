//! Deterministic multi-threaded gzip (pigz style).
//!
//! The input is cut into fixed 1 MiB chunks. Each chunk is compressed as raw deflate at the
//! default level, primed with the previous 32 KiB as dictionary, and ended with a sync flush
//! (the last chunk with a final block). The pieces are concatenated in order between a gzip
//! header (no name, mtime 0, OS 255) and the trailer (CRC-32 and size of the input).
//!
//! The output depends only on the input bytes, never on the number of threads or on timing, so
//! the same tree always gives the same archive on every machine. Any gzip reader decodes it.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use flate2::{Compress, Compression, Crc, FlushCompress, Status};

/// Size of the independently compressed input chunks.
pub const CHUNK_SIZE: usize = 1 << 20;
const WINDOW: usize = 32 * 1024;
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];

struct Job {
    index: u64,
    dict: Vec<u8>,
    data: Vec<u8>,
    last: bool,
}

type JobResult = (u64, io::Result<Vec<u8>>);

/// Compresses one chunk as raw deflate.
fn compress_chunk(dict: &[u8], data: &[u8], last: bool) -> io::Result<Vec<u8>> {
    let mut c = Compress::new(Compression::default(), false);
    if !dict.is_empty() {
        c.set_dictionary(dict).map_err(io::Error::other)?;
    }
    let flush = if last {
        FlushCompress::Finish
    } else {
        FlushCompress::Sync
    };
    let mut out: Vec<u8> = Vec::with_capacity(data.len() / 2 + 4096);
    let mut input = data;
    loop {
        if out.capacity() - out.len() < 1024 {
            out.reserve(out.capacity().max(64 * 1024));
        }
        let before = c.total_in();
        let status = c
            .compress_vec(input, &mut out, flush)
            .map_err(io::Error::other)?;
        let consumed = usize::try_from(c.total_in() - before).unwrap_or(input.len());
        input = &input[consumed.min(input.len())..];
        match status {
            Status::StreamEnd => break,
            Status::Ok | Status::BufError => {
                // A sync flush is complete once all input is consumed and output space is left.
                if !last && input.is_empty() && out.len() < out.capacity() {
                    break;
                }
            }
        }
    }
    Ok(out)
}

/// Compression threads, started when the input outgrows its first chunk.
struct Workers {
    /// `None` once closed.
    jobs: Option<mpsc::Sender<Job>>,
    results: mpsc::Receiver<JobResult>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

impl Workers {
    fn start(threads: usize) -> io::Result<Workers> {
        let (job_tx, job_rx) = mpsc::channel::<Job>();
        let (res_tx, res_rx) = mpsc::channel::<JobResult>();
        let job_rx = Arc::new(Mutex::new(job_rx));
        let mut handles = Vec::with_capacity(threads);
        for _ in 0..threads {
            let job_rx = Arc::clone(&job_rx);
            let res_tx = res_tx.clone();
            let handle = std::thread::Builder::new()
                .name("pgz".into())
                .spawn(move || {
                    loop {
                        let job = {
                            let guard = job_rx.lock().unwrap_or_else(|e| e.into_inner());
                            guard.recv()
                        };
                        let Ok(job) = job else { break };
                        let r = compress_chunk(&job.dict, &job.data, job.last);
                        if res_tx.send((job.index, r)).is_err() {
                            break;
                        }
                    }
                });
            match handle {
                Ok(h) => handles.push(h),
                // Fewer threads still work; none at all is an error.
                Err(e) if handles.is_empty() => return Err(e),
                Err(_) => break,
            }
        }
        Ok(Workers {
            jobs: Some(job_tx),
            results: res_rx,
            handles,
        })
    }
}

impl Drop for Workers {
    /// Closes the job queue and waits for the threads (each ends after its current chunk), also
    /// when the stream is abandoned on an error.
    fn drop(&mut self) {
        self.jobs = None;
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// The writer side: collects input into chunks, dispatches them, writes results in order.
///
/// Memory follows the input: the chunk buffer grows with the data written (a small artifact
/// never reserves a whole chunk), and the compression threads are only started once the input
/// is larger than one chunk (a smaller one is compressed on the calling thread, in one piece).
pub struct ParallelGz<W: Write> {
    out: W,
    buf: Vec<u8>,
    tail: Vec<u8>,
    crc: Crc,
    next_index: u64,
    next_write: u64,
    pending: BTreeMap<u64, Vec<u8>>,
    threads: usize,
    workers: Option<Workers>,
    in_flight: usize,
    max_in_flight: usize,
}

impl<W: Write> ParallelGz<W> {
    fn new_inner(mut out: W, threads: usize) -> io::Result<Self> {
        out.write_all(&GZIP_HEADER)?;
        Ok(ParallelGz {
            out,
            buf: Vec::new(),
            tail: Vec::new(),
            crc: Crc::new(),
            next_index: 0,
            next_write: 0,
            pending: BTreeMap::new(),
            threads: threads.max(1),
            workers: None,
            in_flight: 0,
            max_in_flight: threads.max(1) * 2,
        })
    }

    fn submit(&mut self, last: bool) -> io::Result<()> {
        // A full chunk is likely followed by another: reserve it whole. After the last, nothing.
        let next = if last {
            Vec::new()
        } else {
            Vec::with_capacity(CHUNK_SIZE)
        };
        let data = std::mem::replace(&mut self.buf, next);
        self.crc.update(&data);
        let dict = std::mem::take(&mut self.tail);
        if !last {
            self.tail = data[data.len().saturating_sub(WINDOW)..].to_vec();
        }
        let index = self.next_index;
        self.next_index += 1;
        // Threads pay off from the second chunk on; a one-chunk input stays on this thread.
        if self.workers.is_none() && self.threads > 1 && !last {
            self.workers = Some(Workers::start(self.threads)?);
        }
        match &self.workers {
            None => {
                let c = compress_chunk(&dict, &data, last)?;
                self.pending.insert(index, c);
                self.flush_ready()?;
            }
            Some(w) => {
                w.jobs
                    .as_ref()
                    .ok_or_else(|| io::Error::other("compression workers stopped"))?
                    .send(Job {
                        index,
                        dict,
                        data,
                        last,
                    })
                    .map_err(|_| io::Error::other("compression workers stopped"))?;
                self.in_flight += 1;
                while self.in_flight >= self.max_in_flight {
                    self.receive_one()?;
                }
            }
        }
        Ok(())
    }

    fn receive_one(&mut self) -> io::Result<()> {
        let w = self
            .workers
            .as_ref()
            .ok_or_else(|| io::Error::other("no compression workers"))?;
        let (index, r) = w
            .results
            .recv()
            .map_err(|_| io::Error::other("compression workers stopped"))?;
        self.in_flight -= 1;
        self.pending.insert(index, r?);
        self.flush_ready()
    }

    fn flush_ready(&mut self) -> io::Result<()> {
        while let Some(c) = self.pending.remove(&self.next_write) {
            self.out.write_all(&c)?;
            self.next_write += 1;
        }
        Ok(())
    }

    /// Compresses what is left, writes the trailer and returns the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.submit(true)?;
        while self.in_flight > 0 {
            self.receive_one()?;
        }
        // Closes the job queue and joins the threads.
        self.workers = None;
        if self.next_write != self.next_index {
            return Err(io::Error::other("missing compressed chunk"));
        }
        let crc = self.crc.sum().to_le_bytes();
        let amount = self.crc.amount().to_le_bytes();
        let mut out = self.out;
        out.write_all(&crc)?;
        out.write_all(&amount)?;
        out.flush()?;
        Ok(out)
    }
}

impl<W: Write> Write for ParallelGz<W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let room = CHUNK_SIZE - self.buf.len();
        let n = room.min(data.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == CHUNK_SIZE {
            self.submit(false)?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Runs `body` with a [`ParallelGz`] over `out` using up to `threads` compression threads (1 =
/// compress on the calling thread; threads start only for inputs larger than one chunk), then
/// finishes the stream and returns `body`'s value and the writer.
pub fn with_parallel_gz<W, T, E>(
    out: W,
    threads: usize,
    body: impl FnOnce(&mut ParallelGz<W>) -> Result<T, E>,
) -> Result<(T, W), E>
where
    W: Write,
    E: From<io::Error>,
{
    let mut gz = ParallelGz::new_inner(out, threads)?;
    let v = body(&mut gz)?;
    let w = gz.finish()?;
    Ok((v, w))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::Read;

    fn sample(n: usize) -> Vec<u8> {
        let mut x: u32 = 12345;
        (0..n)
            .map(|i| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                if i % 3 == 0 {
                    (x >> 24) as u8
                } else {
                    b"apiVersion: v1\n"[i % 15]
                }
            })
            .collect()
    }

    fn gz(data: &[u8], threads: usize) -> Vec<u8> {
        let (_, out) = with_parallel_gz(Vec::new(), threads, |w| {
            w.write_all(data)?;
            Ok::<(), io::Error>(())
        })
        .unwrap();
        out
    }

    #[test]
    fn threads_start_only_past_one_chunk_and_buffers_follow_the_input() {
        for (n, threaded) in [
            (1000, false),
            (CHUNK_SIZE - 1, false),
            (CHUNK_SIZE + 1, true),
        ] {
            let data = sample(n);
            let (seen, out) = with_parallel_gz(Vec::new(), 4, |w| {
                assert!(w.buf.capacity() == 0 && w.workers.is_none());
                w.write_all(&data)?;
                Ok::<_, io::Error>((w.workers.is_some(), w.buf.capacity()))
            })
            .unwrap();
            assert_eq!(seen.0, threaded, "n={n}");
            assert!(seen.1 <= CHUNK_SIZE, "n={n}: buffer {}", seen.1);
            assert_eq!(out, gz(&data, 1), "n={n}");
        }
        // An abandoned stream stops its threads (dropping it joins them).
        let data = sample(3 * CHUNK_SIZE);
        let r = with_parallel_gz(Vec::new(), 3, |w| {
            w.write_all(&data)?;
            Err::<(), io::Error>(io::Error::other("body failed"))
        });
        assert!(r.is_err());
    }

    #[test]
    fn round_trips_and_is_thread_independent() {
        for n in [0, 1, 1000, CHUNK_SIZE, CHUNK_SIZE + 1, 3 * CHUNK_SIZE + 777] {
            let data = sample(n);
            let one = gz(&data, 1);
            let three = gz(&data, 3);
            assert_eq!(one, three, "n={n}");
            assert_eq!(&one[..10], &GZIP_HEADER);
            let mut back = Vec::new();
            flate2::read::GzDecoder::new(&one[..])
                .read_to_end(&mut back)
                .unwrap();
            assert_eq!(back, data, "n={n}");
        }
    }
}
