//! Reading a response body with a bound on its size (every answer the client keeps in memory).

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use validator::error_chain;

/// Why [`read_limited`] stopped.
pub(crate) enum ReadError {
    TooLarge,
    Body(String),
}

/// The whole body of `resp`, refused once it grows past `limit` bytes.
pub(crate) async fn read_limited(resp: reqwest::Response, limit: u64) -> Result<Bytes, ReadError> {
    let mut stream = resp.bytes_stream();
    let mut buf = BytesMut::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ReadError::Body(error_chain(&e)))?;
        if buf.len() as u64 + chunk.len() as u64 > limit {
            return Err(ReadError::TooLarge);
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}
