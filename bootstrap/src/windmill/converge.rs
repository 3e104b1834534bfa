//! The calls of steps 4 to 6: the workspace (and whether it is archived), the folder, scripts and
//! global settings. Answers as in the parent module's sources (`windmill-api-workspaces`,
//! `windmill-api-groups/src/folders.rs`, `windmill-api-scripts/src/scripts.rs`,
//! `windmill-api/src/settings.rs`, observed on CE 1.743.0).

use reqwest::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::{SERVICE, Windmill, expect_json, expect_ok, unexpected_status};
use crate::error::{Error, Result};

/// What `GET /api/w/{w}/scripts/get/p/{path}` answers: the newest row, archived or not.
#[derive(Debug, Deserialize)]
pub struct RemoteScript {
    pub hash: String,
    pub content: String,
    pub language: String,
    #[serde(default)]
    pub summary: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub archived: bool,
    /// Set when the version's dependency job failed (`null` otherwise).
    #[serde(default)]
    pub lock_error_logs: Option<String>,
    /// Every other field of the answer (`lock`, `tag`, `envs`, `timeout`, …), as answered: a
    /// field the server leaves out is at its default.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// The body of `scripts/create`: the required fields (`path, summary, description, content,
/// language`) and the parent. No `lock`: for python3 the server queues a dependency job that
/// fills it in, so it is never sent nor compared.
#[derive(Debug, Serialize)]
pub struct NewScript<'a> {
    pub path: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_hash: Option<&'a str>,
    pub summary: &'a str,
    pub description: &'a str,
    pub content: &'a str,
    pub language: &'a str,
}

/// How Windmill answered `scripts/create` (`scripts.rs`, `create_script`; observed on 1.743.0).
#[derive(Debug)]
pub enum Created {
    /// 201 with the new 16-hex hash.
    Hash(String),
    /// 400 "A script with same hash … already exists": this exact request was already applied
    /// (a retry after an answer that was lost).
    SameHashExists,
    /// 400 "lineage must be linear" or "Path conflict": someone else wrote a version between our
    /// read and our write.
    Conflict(String),
}

impl Windmill {
    /// `POST /api/workspaces/exists {"id"}`: a JSON bool (archived workspaces count).
    pub async fn workspace_exists(&self, id: &str) -> Result<bool> {
        let call = "POST /api/workspaces/exists";
        let answer = self
            .request(
                Method::POST,
                "/api/workspaces/exists",
                call,
                Some(&json!({"id": id})),
                None,
            )
            .await?;
        expect_json(call, answer)
    }

    /// `POST /api/workspaces/create {"id","name"}`: 200 `Created workspace <id>`. `username` is
    /// left out: servers that automate usernames reject it (`workspaces.rs`, `create_workspace`). A 400 "already
    /// exists" is success too: someone else created it since it was looked up, or an earlier
    /// try of this call did and its answer was lost; the two cannot be told apart.
    pub async fn create_workspace(&self, id: &str, name: &str) -> Result<()> {
        let call = "POST /api/workspaces/create";
        let answer = self
            .request(
                Method::POST,
                "/api/workspaces/create",
                call,
                Some(&json!({"id": id, "name": name})),
                None,
            )
            .await?;
        match answer.status {
            StatusCode::OK | StatusCode::CREATED => Ok(()),
            StatusCode::BAD_REQUEST if answer.body.contains("already exists") => Ok(()),
            _ => Err(unexpected_status(call, answer)),
        }
    }

    /// `GET /api/w/{w}/workspaces/get_as_superadmin`: the workspace's row; `deleted` is whether it
    /// is archived (`workspaces.rs`, `get_workspace_as_superadmin`; archiving sets `deleted`).
    pub async fn workspace_archived(&self, id: &str) -> Result<bool> {
        #[derive(Deserialize)]
        struct Row {
            deleted: bool,
        }
        let call = format!("GET /api/w/{id}/workspaces/get_as_superadmin");
        let answer = self
            .request(
                Method::GET,
                &format!("/api/w/{id}/workspaces/get_as_superadmin"),
                &call,
                None,
                None,
            )
            .await?;
        expect_json::<Row>(&call, answer).map(|row| row.deleted)
    }

    /// `POST /api/workspaces/unarchive/{id}`: 200 `Unarchived workspace <id>` (`unarchive_workspace`).
    pub async fn unarchive_workspace(&self, id: &str) -> Result<()> {
        let call = format!("POST /api/workspaces/unarchive/{id}");
        let answer = self
            .request(
                Method::POST,
                &format!("/api/workspaces/unarchive/{id}"),
                &call,
                Some(&json!({})),
                None,
            )
            .await?;
        expect_ok(&call, answer)
    }

    /// `GET /api/w/{w}/folders/get/{name}`: 200 or 404.
    pub async fn folder_exists(&self, workspace: &str, name: &str) -> Result<bool> {
        let call = "GET /api/w/{workspace}/folders/get/{name}";
        let answer = self
            .request(
                Method::GET,
                &format!("/api/w/{workspace}/folders/get/{name}"),
                call,
                None,
                None,
            )
            .await?;
        match answer.status {
            StatusCode::OK => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            _ => Err(unexpected_status(call, answer)),
        }
    }

    /// `POST /api/w/{w}/folders/create {"name"}`: 200 `Created folder <name>`; a 400 "already
    /// exists" is success too, as for the workspace.
    pub async fn create_folder(&self, workspace: &str, name: &str) -> Result<()> {
        let call = "POST /api/w/{workspace}/folders/create";
        let answer = self
            .request(
                Method::POST,
                &format!("/api/w/{workspace}/folders/create"),
                call,
                Some(&json!({"name": name})),
                None,
            )
            .await?;
        match answer.status {
            StatusCode::OK | StatusCode::CREATED => Ok(()),
            StatusCode::BAD_REQUEST if answer.body.contains("already exists") => Ok(()),
            _ => Err(unexpected_status(call, answer)),
        }
    }

    /// `GET /api/w/{w}/scripts/get/p/{path}`: the newest version, or `None` on 404
    /// (`Not found: Script not found at path …`).
    pub async fn get_script(&self, workspace: &str, path: &str) -> Result<Option<RemoteScript>> {
        let call = format!("GET /api/w/{workspace}/scripts/get/p/{path}");
        let answer = self
            .request(
                Method::GET,
                &format!("/api/w/{workspace}/scripts/get/p/{path}"),
                &call,
                None,
                None,
            )
            .await?;
        match answer.status {
            StatusCode::NOT_FOUND => Ok(None),
            _ => expect_json(&call, answer).map(Some),
        }
    }

    pub async fn create_script(&self, workspace: &str, script: &NewScript<'_>) -> Result<Created> {
        let call = format!("POST /api/w/{workspace}/scripts/create ({})", script.path);
        let body = serde_json::to_value(script).expect("a NewScript serializes");
        let answer = self
            .request(
                Method::POST,
                &format!("/api/w/{workspace}/scripts/create"),
                &call,
                Some(&body),
                None,
            )
            .await?;
        match answer.status {
            StatusCode::CREATED | StatusCode::OK => {
                let hash = answer.body.trim().to_owned();
                if hash.is_empty() || !hash.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err(Error::Unexpected {
                        service: SERVICE,
                        call,
                        detail: "the answer is not a script hash".into(),
                    });
                }
                Ok(Created::Hash(hash))
            }
            StatusCode::BAD_REQUEST if answer.body.contains("same hash") => Ok(Created::SameHashExists),
            StatusCode::BAD_REQUEST
                if answer.body.contains("lineage must be linear") || answer.body.contains("Path conflict") =>
            {
                Ok(Created::Conflict(answer.shown()))
            }
            _ => Err(unexpected_status(&call, answer)),
        }
    }

    /// `GET /api/settings/global/{key}`: the stored JSON value, `null` when unset.
    pub async fn get_setting(&self, key: &str) -> Result<Value> {
        let call = format!("GET /api/settings/global/{key}");
        let answer = self
            .request(Method::GET, &format!("/api/settings/global/{key}"), &call, None, None)
            .await?;
        expect_json(&call, answer)
    }

    /// `POST /api/settings/global/{key} {"value": …}`: 200 with an empty body.
    pub async fn set_setting(&self, key: &str, value: &Value) -> Result<()> {
        let call = format!("POST /api/settings/global/{key}");
        let answer = self
            .request(
                Method::POST,
                &format!("/api/settings/global/{key}"),
                &call,
                Some(&json!({"value": value})),
                None,
            )
            .await?;
        expect_ok(&call, answer)
    }
}
