//! Output storage through `object_store`: a local directory by default,
//! `s3://bucket/prefix` (credentials and endpoint from the usual `AWS_*`
//! variables, so S3-compatible servers work) or `gs://bucket/prefix`. Paths
//! given to it are relative to the root. Every write is atomic (the local
//! store writes a temporary file and renames; object stores publish a PUT
//! whole), and writes retry with backoff, so a committed file is never
//! partial.
//!
//! Inputs are read through the same layer: [`ObjectReader`] is a blocking
//! `Read + Seek` over one object (a local file, `s3://` or `gs://`) that
//! fetches it in ranged GETs, so a worker reads only its shard's bytes.

use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("storage {url}: {message}")]
    Open { url: String, message: String },
    #[error("storage {url}: {op} {path}: {source}")]
    Op {
        url: String,
        op: &'static str,
        path: String,
        #[source]
        source: Box<object_store::Error>,
    },
    #[error("storage {url}: {path}: checksum {got} differs from the manifest's {want}")]
    Checksum {
        url: String,
        path: String,
        got: String,
        want: String,
    },
    #[error("{}: {source}", .path.display())]
    Local {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What a store says about one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    pub size: u64,
    pub e_tag: Option<String>,
    /// RFC 3339.
    pub modified: String,
}

/// A storage root.
#[derive(Clone)]
pub struct Storage {
    store: Arc<dyn ObjectStore>,
    prefix: ObjPath,
    url: String,
    retries: u32,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage").field("url", &self.url).finish()
    }
}

/// The local directory `url` names (a plain path or `file://PATH`), or
/// `None` for an object store: the one place that decides what is local.
pub fn local_path(url: &str) -> Option<&std::path::Path> {
    match url.split_once("://") {
        None => Some(std::path::Path::new(url)),
        Some(("file", rest)) => Some(std::path::Path::new(rest)),
        Some(_) => None,
    }
}

/// What names one input file however it is spelled: a local path (or
/// `file://` URL) made absolute with `.` and `..` resolved, through
/// symbolic links when it exists here; an object-store URL with repeated
/// slashes in its key collapsed.
pub fn same_input(p: &str) -> String {
    let Some(local) = local_path(p) else {
        let (scheme, rest) = p.split_once("://").unwrap_or(("", p));
        let parts: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
        return format!("{}://{}", scheme.to_ascii_lowercase(), parts.join("/"));
    };
    if let Ok(real) = std::fs::canonicalize(local) {
        return real.display().to_string();
    }
    let abs = std::path::absolute(local).unwrap_or_else(|_| local.to_path_buf());
    let mut out = std::path::PathBuf::new();
    for c in abs.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out.display().to_string()
}

/// Makes ring the process's TLS crypto provider for the object-store
/// clients (reqwest is built without a provider of its own, so that the
/// build has one crypto library, not ring and aws-lc); a provider installed
/// before, by the binary or a test, is kept.
fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Storage {
    /// Opens a local directory (created if missing) or an object-store URL.
    pub fn open(url: &str) -> Result<Storage, StorageError> {
        Storage::open_root(url, true)
    }

    fn open_root(url: &str, create: bool) -> Result<Storage, StorageError> {
        let err = |message: String| StorageError::Open {
            url: url.to_string(),
            message,
        };
        let (store, prefix): (Arc<dyn ObjectStore>, String) = match url.split_once("://") {
            Some(("s3", rest)) => {
                install_tls_provider();
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                let mut b = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
                // S3-compatible servers (MinIO, moto) are often plain HTTP.
                if std::env::var("AWS_ENDPOINT_URL").is_ok_and(|e| e.starts_with("http://")) {
                    b = b.with_allow_http(true);
                }
                if let Ok(e) = std::env::var("AWS_ENDPOINT_URL") {
                    b = b.with_endpoint(e);
                }
                (
                    Arc::new(b.build().map_err(|e| err(e.to_string()))?),
                    prefix.to_string(),
                )
            }
            Some(("gs", rest)) => {
                install_tls_provider();
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                let b = object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_bucket_name(bucket);
                (
                    Arc::new(b.build().map_err(|e| err(e.to_string()))?),
                    prefix.to_string(),
                )
            }
            Some(("file", rest)) => return Storage::open_root(rest, create),
            Some((scheme, _)) => {
                return Err(err(format!(
                    "unsupported scheme {scheme:?} (use a path, s3:// or gs://)"
                )))
            }
            None => {
                if create {
                    std::fs::create_dir_all(url).map_err(|e| err(e.to_string()))?;
                }
                let fs = object_store::local::LocalFileSystem::new_with_prefix(url)
                    .map_err(|e| err(e.to_string()))?;
                (Arc::new(fs), String::new())
            }
        };
        Ok(Storage {
            store,
            prefix: ObjPath::from(prefix.trim_matches('/')),
            url: url.to_string(),
            retries: 4,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    fn path(&self, rel: &str) -> ObjPath {
        let mut p = self.prefix.clone();
        for part in rel.split('/').filter(|s| !s.is_empty()) {
            p = p.join(part);
        }
        p
    }

    fn op_err(&self, op: &'static str, rel: &str, source: object_store::Error) -> StorageError {
        StorageError::Op {
            url: self.url.clone(),
            op,
            path: rel.to_string(),
            source: Box::new(source),
        }
    }

    /// Retries transient failures with exponential backoff.
    async fn retry<T, F, Fut>(
        &self,
        op: &'static str,
        rel: &str,
        mut f: F,
    ) -> Result<T, StorageError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, object_store::Error>>,
    {
        let mut delay = Duration::from_millis(100);
        let mut attempt = 0;
        loop {
            match f().await {
                Ok(v) => return Ok(v),
                Err(
                    e @ (object_store::Error::NotFound { .. }
                    | object_store::Error::AlreadyExists { .. }),
                ) => return Err(self.op_err(op, rel, e)),
                Err(e) if attempt < self.retries => {
                    tracing::warn!(url = %self.url, op, path = rel, error = %e, attempt, "storage operation failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                    attempt += 1;
                }
                Err(e) => return Err(self.op_err(op, rel, e)),
            }
        }
    }

    /// Writes a whole object, replacing any old one.
    pub async fn put(&self, rel: &str, bytes: bytes::Bytes) -> Result<(), StorageError> {
        let p = self.path(rel);
        self.retry("put", rel, || {
            self.store.put(&p, PutPayload::from(bytes.clone()))
        })
        .await
        .map(|_| ())
    }

    /// Writes an object only if none exists there; false if one did.
    pub async fn put_if_absent(
        &self,
        rel: &str,
        bytes: bytes::Bytes,
    ) -> Result<bool, StorageError> {
        let p = self.path(rel);
        let opts = || PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        match self
            .retry("put", rel, || {
                self.store
                    .put_opts(&p, PutPayload::from(bytes.clone()), opts())
            })
            .await
        {
            Ok(_) => Ok(true),
            Err(StorageError::Op { source, .. })
                if matches!(*source, object_store::Error::AlreadyExists { .. }) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    pub async fn get(&self, rel: &str) -> Result<bytes::Bytes, StorageError> {
        let p = self.path(rel);
        let r = self.retry("get", rel, || self.store.get(&p)).await?;
        r.bytes().await.map_err(|e| self.op_err("get", rel, e))
    }

    /// The SHA-256 of an object (lowercase hex), streamed: what a job
    /// compares with the digest it recorded when it committed the file.
    pub async fn sha256(&self, rel: &str) -> Result<String, StorageError> {
        use futures::TryStreamExt;
        use sha2::Digest;
        let p = self.path(rel);
        let r = self.retry("get", rel, || self.store.get(&p)).await?;
        let mut stream = r.into_stream();
        let mut h = sha2::Sha256::new();
        while let Some(chunk) = stream
            .try_next()
            .await
            .map_err(|e| self.op_err("get", rel, e))?
        {
            h.update(&chunk);
        }
        Ok(hex::encode(h.finalize()))
    }

    /// Size of an object.
    pub async fn size(&self, rel: &str) -> Result<u64, StorageError> {
        Ok(self.head(rel).await?.size)
    }

    /// Size, ETag and modification time of an object (what a resumed job
    /// compares to notice an input that changed).
    pub async fn head(&self, rel: &str) -> Result<ObjectInfo, StorageError> {
        let p = self.path(rel);
        let m = self.retry("head", rel, || self.store.head(&p)).await?;
        Ok(ObjectInfo {
            size: m.size,
            e_tag: m.e_tag,
            modified: m.last_modified.to_rfc3339(),
        })
    }

    /// Bytes `start..end` of an object.
    pub async fn get_range(
        &self,
        rel: &str,
        start: u64,
        end: u64,
    ) -> Result<bytes::Bytes, StorageError> {
        let p = self.path(rel);
        self.retry("get", rel, || self.store.get_range(&p, start..end))
            .await
    }

    /// Copies an object (server-side on object stores; a whole-file copy
    /// through a temporary name locally), replacing any old target.
    pub async fn copy(&self, from: &str, to: &str) -> Result<(), StorageError> {
        let (f, t) = (self.path(from), self.path(to));
        self.retry("copy", from, || self.store.copy(&f, &t)).await
    }

    pub async fn exists(&self, rel: &str) -> Result<bool, StorageError> {
        match self.store.head(&self.path(rel)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.op_err("head", rel, e)),
        }
    }

    pub async fn delete(&self, rel: &str) -> Result<(), StorageError> {
        let p = self.path(rel);
        match self.retry("delete", rel, || self.store.delete(&p)).await {
            Err(StorageError::Op { source, .. })
                if matches!(*source, object_store::Error::NotFound { .. }) =>
            {
                Ok(())
            }
            r => r,
        }
    }

    /// Removes the empty directories under `rel` (deleting a local object
    /// leaves its directory behind; object stores have none). Best effort:
    /// what cannot be removed stays.
    pub async fn remove_empty_dirs(&self, rel: &str) {
        fn sweep(d: &std::path::Path) -> bool {
            let Ok(rd) = std::fs::read_dir(d) else {
                return false;
            };
            let mut empty = true;
            for e in rd.flatten() {
                let p = e.path();
                if !(p.is_dir() && sweep(&p)) {
                    empty = false;
                }
            }
            empty && std::fs::remove_dir(d).is_ok()
        }
        if let Some(root) = local_path(&self.url) {
            sweep(&root.join(rel));
        }
    }

    /// Files that a local store's interrupted writes left under `rel`:
    /// object_store's `LocalFileSystem` writes `NAME#N` and renames it to
    /// `NAME` when the write completes, and its listing hides such names,
    /// so a writer killed mid-put leaves one that [`Storage::list`] never
    /// shows. Each as (its path relative to the root, the `NAME` it was
    /// for). Empty for an object store, where a put is all or nothing.
    pub fn local_write_leftovers(&self, rel: &str) -> Vec<(String, String)> {
        fn walk(root: &std::path::Path, d: &std::path::Path, out: &mut Vec<(String, String)>) {
            let Ok(rd) = std::fs::read_dir(d) else {
                return;
            };
            for e in rd.flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(root, &p, out);
                    continue;
                }
                let Ok(rel) = p.strip_prefix(root) else {
                    continue;
                };
                let rel = rel.to_string_lossy().replace('\\', "/");
                if let Some((name, n)) = rel.rsplit_once('#') {
                    if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) {
                        out.push((rel.clone(), name.to_string()));
                    }
                }
            }
        }
        let mut out = Vec::new();
        if let Some(root) = local_path(&self.url) {
            walk(root, &root.join(rel), &mut out);
        }
        out.sort();
        out
    }

    /// Deletes a file [`Storage::local_write_leftovers`] found (which the
    /// store's own delete cannot name).
    pub fn remove_local_leftover(&self, rel: &str) -> Result<(), StorageError> {
        let Some(root) = local_path(&self.url) else {
            return Ok(());
        };
        match std::fs::remove_file(root.join(rel)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StorageError::Local {
                path: root.join(rel),
                source: e,
            }),
        }
    }

    /// Downloads `files` (path relative to the root, SHA-256 when known)
    /// into `local`, checking each checksum; `done` is called per file.
    pub async fn download_checked(
        &self,
        files: &[(String, Option<String>)],
        local: &std::path::Path,
        mut done: impl FnMut(),
    ) -> Result<usize, StorageError> {
        use sha2::Digest;
        for (rel, sha) in files {
            let bytes = self.get(rel).await?;
            if let Some(want) = sha {
                let got = hex::encode(sha2::Sha256::digest(&bytes));
                if &got != want {
                    return Err(StorageError::Checksum {
                        url: self.url.clone(),
                        path: rel.clone(),
                        got,
                        want: want.clone(),
                    });
                }
            }
            let p = local.join(rel);
            let local_err = |path: &std::path::Path| {
                let path = path.to_path_buf();
                move |source| StorageError::Local { path, source }
            };
            std::fs::create_dir_all(p.parent().unwrap_or(local)).map_err(local_err(&p))?;
            std::fs::write(&p, &bytes).map_err(local_err(&p))?;
            done();
        }
        Ok(files.len())
    }

    /// Uploads every file under the local `dir`, keeping relative paths,
    /// `_manifest.json` and then `_SUCCESS` last: a reader that finds them
    /// finds every file the manifest lists.
    pub async fn upload_dir(&self, dir: &std::path::Path) -> Result<usize, StorageError> {
        let local_err = |path: &std::path::Path| {
            let path = path.to_path_buf();
            move |source| StorageError::Local { path, source }
        };
        let mut files = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).map_err(local_err(&d))? {
                let p = e.map_err(local_err(&d))?.path();
                if p.is_dir() {
                    stack.push(p);
                } else if let Ok(rel) = p.strip_prefix(dir) {
                    files.push(rel.to_string_lossy().replace('\\', "/"));
                }
            }
        }
        files.sort();
        files.sort_by_key(|f| {
            use paraforge_core::layout::{MANIFEST_FILE, SUCCESS_FILE};
            (f == SUCCESS_FILE, f == MANIFEST_FILE)
        });
        for rel in &files {
            let p = dir.join(rel);
            let bytes = std::fs::read(&p).map_err(local_err(&p))?;
            self.put(rel, bytes::Bytes::from(bytes)).await?;
        }
        Ok(files.len())
    }

    /// Every object under `rel_prefix`: (path relative to the root, size).
    pub async fn list(&self, rel_prefix: &str) -> Result<Vec<(String, u64)>, StorageError> {
        use futures::TryStreamExt;
        let p = self.path(rel_prefix);
        let metas: Vec<object_store::ObjectMeta> = self
            .store
            .list(Some(&p))
            .try_collect()
            .await
            .map_err(|e| self.op_err("list", rel_prefix, e))?;
        let root = self.prefix.as_ref();
        let mut out: Vec<(String, u64)> = metas
            .into_iter()
            .map(|m| {
                let full = m.location.as_ref().to_string();
                let rel = full
                    .strip_prefix(root)
                    .unwrap_or(&full)
                    .trim_start_matches('/')
                    .to_string();
                (rel, m.size)
            })
            .collect();
        out.sort();
        Ok(out)
    }
}

/// Bytes fetched per ranged GET.
const READ_BLOCK: u64 = 8 << 20;

/// A blocking `Read + Seek` over one object. Each refill is a ranged GET of
/// up to 8 MB, run on a scoped thread so that it never blocks inside (or
/// needs) the caller's async runtime.
pub struct ObjectReader {
    storage: Storage,
    rel: String,
    location: String,
    size: u64,
    info: ObjectInfo,
    pos: u64,
    buf: bytes::Bytes,
    buf_start: u64,
    rt: tokio::runtime::Handle,
}

impl std::fmt::Debug for ObjectReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectReader")
            .field("location", &self.location)
            .field("size", &self.size)
            .finish()
    }
}

/// The runtime that drives reads when the caller has none.
fn fallback_runtime() -> Result<tokio::runtime::Handle, std::io::Error> {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    if let Some(rt) = RT.get() {
        return Ok(rt.handle().clone());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("paraforge-io")
        .enable_all()
        .build()?;
    Ok(RT.get_or_init(|| rt).handle().clone())
}

fn block_on<F: std::future::Future + Send>(rt: &tokio::runtime::Handle, f: F) -> F::Output
where
    F::Output: Send,
{
    std::thread::scope(|s| {
        s.spawn(|| rt.block_on(f))
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

impl ObjectReader {
    /// Opens `location`: a local path, `file://`, `s3://bucket/key` or
    /// `gs://bucket/key`. Errors name the location.
    pub fn open(location: &str) -> Result<ObjectReader, std::io::Error> {
        let io_err = |kind, msg: String| std::io::Error::new(kind, msg);
        let (root, rel) = match location.split_once("://") {
            Some((scheme, rest)) if scheme != "file" => {
                let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
                if key.is_empty() {
                    return Err(io_err(
                        std::io::ErrorKind::InvalidInput,
                        format!("{location}: no object key after the bucket"),
                    ));
                }
                (format!("{scheme}://{bucket}"), key.to_string())
            }
            _ => {
                let local = location.strip_prefix("file://").unwrap_or(location);
                let abs = std::fs::canonicalize(local)?;
                if abs.is_dir() {
                    return Err(io_err(
                        std::io::ErrorKind::InvalidInput,
                        "is a directory, not a file".into(),
                    ));
                }
                let rel = abs.to_str().map(str::to_string).ok_or_else(|| {
                    io_err(
                        std::io::ErrorKind::InvalidInput,
                        "the path is not valid UTF-8".into(),
                    )
                })?;
                ("/".to_string(), rel)
            }
        };
        let storage = Storage::open_root(&root, false)
            .map_err(|e| io_err(std::io::ErrorKind::Other, e.to_string()))?;
        let rt = match tokio::runtime::Handle::try_current() {
            Ok(h) => h,
            Err(_) => fallback_runtime()?,
        };
        let info = block_on(&rt, storage.head(&rel)).map_err(to_io)?;
        Ok(ObjectReader {
            storage,
            rel,
            location: location.to_string(),
            size: info.size,
            info,
            pos: 0,
            buf: bytes::Bytes::new(),
            buf_start: 0,
            rt,
        })
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// The object's size, ETag and modification time when it was opened.
    pub fn info(&self) -> &ObjectInfo {
        &self.info
    }
}

fn to_io(e: StorageError) -> std::io::Error {
    let kind = match &e {
        StorageError::Op { source, .. }
            if matches!(**source, object_store::Error::NotFound { .. }) =>
        {
            std::io::ErrorKind::NotFound
        }
        _ => std::io::ErrorKind::Other,
    };
    std::io::Error::new(kind, e.to_string())
}

impl std::io::Read for ObjectReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.pos >= self.size || out.is_empty() {
            return Ok(0);
        }
        let end = self.buf_start + self.buf.len() as u64;
        if self.pos < self.buf_start || self.pos >= end {
            let stop = (self.pos + READ_BLOCK).min(self.size);
            let (storage, rel, start) = (&self.storage, &self.rel, self.pos);
            self.buf = block_on(&self.rt, storage.get_range(rel, start, stop)).map_err(to_io)?;
            self.buf_start = self.pos;
            if self.buf.is_empty() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("{}: the object ended early", self.location),
                ));
            }
        }
        let off = (self.pos - self.buf_start) as usize;
        let n = out.len().min(self.buf.len() - off);
        out[..n].copy_from_slice(&self.buf[off..off + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl std::io::Seek for ObjectReader {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        let target = match to {
            std::io::SeekFrom::Start(p) => Some(p),
            std::io::SeekFrom::End(d) => self.size.checked_add_signed(d),
            std::io::SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = target.ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "seek before the start")
        })?;
        Ok(self.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn local_storage_round_trips_and_refuses_to_overwrite_with_put_if_absent() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("out");
        let s = Storage::open(root.to_str().unwrap()).unwrap();
        s.put(
            "shard=000001/part-t7.parquet",
            bytes::Bytes::from_static(b"abc"),
        )
        .await
        .unwrap();
        assert_eq!(
            &s.get("shard=000001/part-t7.parquet").await.unwrap()[..],
            b"abc"
        );
        assert!(root.join("shard=000001/part-t7.parquet").is_file());
        assert!(s
            .put_if_absent("_SUCCESS", bytes::Bytes::new())
            .await
            .unwrap());
        assert!(!s
            .put_if_absent("_SUCCESS", bytes::Bytes::from_static(b"x"))
            .await
            .unwrap());
        assert_eq!(
            s.list("").await.unwrap(),
            [
                ("_SUCCESS".to_string(), 0),
                ("shard=000001/part-t7.parquet".into(), 3)
            ]
        );
        s.delete("shard=000001/part-t7.parquet").await.unwrap();
        s.delete("shard=000001/part-t7.parquet").await.unwrap();
        assert!(!s.exists("shard=000001/part-t7.parquet").await.unwrap());
        let e = s.get("missing").await.unwrap_err().to_string();
        assert!(e.contains("missing"), "{e}");
        assert!(Storage::open("ftp://x/y")
            .unwrap_err()
            .to_string()
            .contains("ftp"));
    }

    /// A store that refuses writes for a while (a plain file sits where the
    /// object's directory must go) is retried with backoff until it works.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_retry_through_a_store_that_fails_for_a_while() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::open(dir.path().to_str().unwrap()).unwrap();
        let blocker = dir.path().join("shard=000001");
        std::fs::write(&blocker, b"in the way").unwrap();
        let b2 = blocker.clone();
        let unblock = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(250)).await;
            std::fs::remove_file(b2).unwrap();
        });
        s.put(
            "shard=000001/part.parquet",
            bytes::Bytes::from_static(b"rows"),
        )
        .await
        .unwrap();
        unblock.await.unwrap();
        assert_eq!(
            &s.get("shard=000001/part.parquet").await.unwrap()[..],
            b"rows"
        );
        // Blocked for good: the error names the store, the operation and the path.
        std::fs::write(dir.path().join("shard=000002"), b"x").unwrap();
        let e = s
            .put(
                "shard=000002/part.parquet",
                bytes::Bytes::from_static(b"rows"),
            )
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("put") && e.contains("shard=000002/part.parquet"),
            "{e}"
        );
    }

    /// A reader never sees part of an object: before the put it sees
    /// nothing, after it the whole thing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_written_object_is_never_seen_partial() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::open(dir.path().to_str().unwrap()).unwrap();
        let big = bytes::Bytes::from(vec![7u8; 32 << 20]);
        let path = dir.path().join("shard=000003/part.parquet");
        let watcher = std::thread::spawn(move || {
            let mut seen = 0;
            for _ in 0..20_000 {
                if let Ok(b) = std::fs::read(&path) {
                    assert_eq!(b.len(), 32 << 20, "a partial file was visible");
                    seen += 1;
                    if seen > 2 {
                        break;
                    }
                }
            }
        });
        s.put("shard=000003/part.parquet", big).await.unwrap();
        watcher.join().unwrap();
    }

    #[test]
    fn object_reader_reads_and_seeks_like_a_file_across_blocks() {
        use std::io::{Read, Seek, SeekFrom};
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.bin");
        let data: Vec<u8> = (0..(READ_BLOCK as usize * 2 + 12345))
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        std::fs::write(&p, &data).unwrap();
        let mut r = ObjectReader::open(p.to_str().unwrap()).unwrap();
        assert_eq!(r.size(), data.len() as u64);
        let mut all = Vec::new();
        r.read_to_end(&mut all).unwrap();
        assert!(all == data);
        let at = READ_BLOCK - 3;
        r.seek(SeekFrom::Start(at)).unwrap();
        let mut six = [0u8; 6];
        r.read_exact(&mut six).unwrap();
        assert_eq!(&six, &data[at as usize..at as usize + 6]);
        r.seek(SeekFrom::End(-2)).unwrap();
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, &data[data.len() - 2..]);

        let e = ObjectReader::open(dir.path().join("missing.tsv").to_str().unwrap()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        assert!(ObjectReader::open(dir.path().to_str().unwrap()).is_err());
        assert!(ObjectReader::open("s3://bucket-only")
            .unwrap_err()
            .to_string()
            .contains("s3://bucket-only"));
    }
}
