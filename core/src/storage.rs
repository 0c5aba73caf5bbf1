//! Output storage through `object_store`: a local directory by default,
//! `s3://bucket/prefix` (credentials and endpoint from the usual `AWS_*`
//! variables, so S3-compatible servers work) or `gs://bucket/prefix`. Paths
//! given to it are relative to the root. Every write is atomic (the local
//! store writes a temporary file and renames; object stores publish a PUT
//! whole), and writes retry with backoff, so a committed file is never
//! partial.

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

impl Storage {
    /// Opens a local directory (created if missing) or an object-store URL.
    pub fn open(url: &str) -> Result<Storage, StorageError> {
        let err = |message: String| StorageError::Open {
            url: url.to_string(),
            message,
        };
        let (store, prefix): (Arc<dyn ObjectStore>, String) = match url.split_once("://") {
            Some(("s3", rest)) => {
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
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                let b = object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_bucket_name(bucket);
                (
                    Arc::new(b.build().map_err(|e| err(e.to_string()))?),
                    prefix.to_string(),
                )
            }
            Some(("file", rest)) => return Storage::open(rest),
            Some((scheme, _)) => {
                return Err(err(format!(
                    "unsupported scheme {scheme:?} (use a path, s3:// or gs://)"
                )))
            }
            None => {
                std::fs::create_dir_all(url).map_err(|e| err(e.to_string()))?;
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
}
