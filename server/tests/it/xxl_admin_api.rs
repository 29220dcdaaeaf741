//! XXL-JOB's admin API on a node, without an executor: off unless its token is set, its
//! token checked, its registry bound by the allowlist of executor networks, and what a
//! registration, a beat, a callback and a removal do, over real HTTP.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use reqwest::Method;
use serde_json::{Value, json};
use support::node::Solo;

const XXL_TOKEN: &str = "xxl-test-token-0123";

async fn post(node: &Solo, path: &str, token: &str, body: Value) -> (u16, Value) {
    let response = carillon_tls::http_client()
        .unwrap()
        .post(node.url(path))
        .header("XXL-JOB-ACCESS-TOKEN", token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn registry(app: &str, address: &str) -> Value {
    json!({ "registryGroup": "EXECUTOR", "registryKey": app, "registryValue": address })
}

async fn executors(node: &Solo) -> Vec<Value> {
    let (_, body) = node.call(Method::GET, "/api/v1/executors", None).await;
    body["executors"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_there_is_no_xxl_api() {
    let node = Solo::start(|_| {}).await;
    let (status, _) = post(
        &node,
        "/xxl-job-admin/api/registry",
        "anything-at-all",
        registry("app", "http://127.0.0.1:9"),
    )
    .await;
    assert_eq!(status, 404);
    assert!(executors(&node).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrations_beats_callbacks_and_removals_speak_xxl_jobs_protocol() {
    let node = Solo::start(|spec| {
        spec.extra_env
            .push(("CARILLON_XXL_ACCESS_TOKEN", XXL_TOKEN.to_owned()));
        spec.extra_env
            .push(("CARILLON_XXL_PATH_PREFIX", "/legacy/xxl".to_owned()));
        spec.extra_env
            .push(("CARILLON_EGRESS_ALLOWED_NETWORKS", "127.0.0.0/8".to_owned()));
    })
    .await;
    let base = "/legacy/xxl/api";
    // The token is checked, in XXL-JOB's words and shape.
    let (status, body) = post(
        &node,
        &format!("{base}/registry"),
        "wrong-token-0000",
        registry("sales", "http://127.0.0.1:9"),
    )
    .await;
    assert_eq!((status, body["code"].clone()), (200, json!(500)), "{body}");
    assert_eq!(body["msg"], "The access token is wrong.");
    // The allowlist holds for XXL-JOB executors' addresses.
    let (_, body) = post(
        &node,
        &format!("{base}/registry"),
        XXL_TOKEN,
        registry("sales", "http://10.1.2.3:9999/"),
    )
    .await;
    assert_eq!(body["code"], 500, "{body}");
    assert!(
        body["msg"].as_str().unwrap().contains("allowed_networks"),
        "{body}"
    );
    // Bad parameters are named.
    let (_, body) = post(&node, &format!("{base}/registry"), XXL_TOKEN, json!({ "registryGroup": "ADMIN", "registryKey": "x", "registryValue": "http://127.0.0.1:9" })).await;
    assert!(
        body["msg"].as_str().unwrap().contains("registryGroup"),
        "{body}"
    );
    let (_, body) = post(
        &node,
        &format!("{base}/registry"),
        XXL_TOKEN,
        registry("sales", "ftp://127.0.0.1:9"),
    )
    .await;
    assert!(
        body["msg"].as_str().unwrap().contains("registryValue"),
        "{body}"
    );
    assert!(
        executors(&node).await.is_empty(),
        "nothing refused was stored"
    );

    // A registration, then beats: one executor, an XXL-JOB one, taking any handler.
    for _ in 0..3 {
        let (_, body) = post(
            &node,
            &format!("{base}/registry"),
            XXL_TOKEN,
            registry("sales", "http://127.0.0.1:9999/"),
        )
        .await;
        assert_eq!(body, json!({ "code": 200, "msg": null }));
    }
    let list = executors(&node).await;
    assert_eq!(list.len(), 1, "{list:?}");
    let executor = &list[0];
    assert_eq!(executor["protocol"], "xxl");
    assert_eq!(executor["app"], "sales");
    assert_eq!(executor["address"], "http://127.0.0.1:9999");
    assert_eq!(executor["handlers"], json!(["*"]));
    assert_eq!(executor["healthy"], true);

    // A callback for an attempt that does not exist changes nothing and is acknowledged, as
    // XXL-JOB's admin does; a malformed one is refused.
    let (_, body) = post(
        &node,
        &format!("{base}/callback"),
        XXL_TOKEN,
        json!([{ "logId": 987654, "logDateTim": 0, "handleCode": 200, "handleMsg": "ok" }]),
    )
    .await;
    assert_eq!(body["code"], 200, "{body}");
    let (_, body) = post(
        &node,
        &format!("{base}/callback"),
        XXL_TOKEN,
        json!({ "logId": 1 }),
    )
    .await;
    assert_eq!(body["code"], 500, "{body}");

    // Carillon executors cannot take the ids kept for XXL-JOB executors.
    let (status, body) = node
        .call(
            Method::POST,
            "/api/v1/executors/register",
            Some(
                json!({ "protocol": 1, "executor_id": "xxl-0000000000000001", "app": "sales",
                "address": "http://127.0.0.1:9998", "weight": 1, "capacity": 1, "handlers": [] }),
            ),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.to_string().contains("kept for XXL-JOB executors"),
        "{body}"
    );

    // registryRemove: it leaves.
    let (_, body) = post(
        &node,
        &format!("{base}/registryRemove"),
        XXL_TOKEN,
        registry("sales", "http://127.0.0.1:9999"),
    )
    .await;
    assert_eq!(body["code"], 200, "{body}");
    let list = executors(&node).await;
    assert_eq!(list[0]["state"], "left", "{list:?}");
    assert_eq!(list[0]["healthy"], false);
    // Registering again brings it back.
    let (_, body) = post(
        &node,
        &format!("{base}/registry"),
        XXL_TOKEN,
        registry("sales", "http://127.0.0.1:9999"),
    )
    .await;
    assert_eq!(body["code"], 200, "{body}");
    assert_eq!(executors(&node).await[0]["healthy"], true);
}
