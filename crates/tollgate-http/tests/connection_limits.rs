//! The listeners' bounds as a library user sets them: values that would make a server useless
//! are read as the least that works.

mod common;

use axum::Router;
use axum::routing::get;

#[tokio::test]
async fn a_cap_of_zero_connections_still_serves_one_at_a_time() {
    let app = Router::new().route("/", get(|| async { "ok" }));
    let address = common::start(app.into(), common::limits(0)).await;
    for _ in 0..2 {
        // Each answered (a 200) rather than left waiting for a permit.
        common::get(address, "/").await;
    }
}
