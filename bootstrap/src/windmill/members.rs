//! The calls of the front-end's workspace operator (step 4): the workspace's members, adding
//! one as an operator, its role, and its access to the folder. Answers as Windmill's server code
//! has them from 1.509 to 1.788 (`windmill-api-workspaces/src/workspaces.rs`: `add_user`;
//! `windmill-api-users/src/users.rs`: `list_users`, `update_workspace_user`;
//! `windmill-api-groups/src/folders.rs`: `get_folder`, `remove_owner`; `granular_acls.rs`:
//! `add_granular_acl`) and as 1.587 and 1.788 answered them (the reference's "Worker 10").

use std::collections::BTreeMap;

use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::json;

use super::{Windmill, expect_json, expect_ok, unexpected_status};
use crate::error::Result;

/// A member of a workspace, as `users/list` answers it (other fields ignored: `role`,
/// `added_via`, `is_service_account` came and went between versions).
#[derive(Debug, Clone, Deserialize)]
pub struct Member {
    pub email: String,
    pub username: String,
    #[serde(default)]
    pub is_admin: bool,
    #[serde(default)]
    pub operator: bool,
    #[serde(default)]
    pub disabled: bool,
}

/// A folder's owners and ACL, as `folders/get` answers them.
#[derive(Debug, Clone, Deserialize)]
pub struct Folder {
    #[serde(default)]
    pub owners: Vec<String>,
    /// `u/<name>` or `g/<group>` → write.
    #[serde(default)]
    pub extra_perms: BTreeMap<String, bool>,
}

/// How `workspaces/add_user` answered.
#[derive(Debug, PartialEq, Eq)]
pub enum AddedUser {
    Added,
    /// 400 `username is required`: the instance does not derive usernames (its setting
    /// `automate_username_creation` is off, as on instances older than that setting).
    UsernameRequired,
    /// 400 `user with email … already exists`: added meanwhile, or by an earlier try whose
    /// answer was lost.
    Exists,
}

impl Windmill {
    /// `GET /api/w/{w}/users/list`: the workspace's members.
    pub async fn members(&self, workspace: &str) -> Result<Vec<Member>> {
        let call = "GET /api/w/{workspace}/users/list";
        let answer = self
            .request(Method::GET, &format!("/api/w/{workspace}/users/list"), call, None, None)
            .await?;
        expect_json(call, answer)
    }

    /// `POST /api/w/{w}/workspaces/add_user {"email","is_admin":false,"operator":true}`, with
    /// `username` only when given (an instance that derives usernames refuses one): 201 `user
    /// with email … added` (200 was noted on 1.788).
    pub async fn add_operator(&self, workspace: &str, email: &str, username: Option<&str>) -> Result<AddedUser> {
        let call = "POST /api/w/{workspace}/workspaces/add_user";
        let mut body = json!({"email": email, "is_admin": false, "operator": true});
        if let Some(username) = username {
            body["username"] = json!(username);
        }
        let answer = self
            .request(
                Method::POST,
                &format!("/api/w/{workspace}/workspaces/add_user"),
                call,
                Some(&body),
                None,
            )
            .await?;
        match answer.status {
            status if status.is_success() => Ok(AddedUser::Added),
            StatusCode::BAD_REQUEST if answer.body.contains("username is required") => Ok(AddedUser::UsernameRequired),
            StatusCode::BAD_REQUEST if answer.body.contains("already exists") => Ok(AddedUser::Exists),
            _ => Err(unexpected_status(call, answer)),
        }
    }

    /// `POST /api/w/{w}/users/update/{username} {"is_admin":false,"operator":true,"disabled":false}`.
    /// The username comes from the server's own list and was checked to be Windmill's shape.
    pub async fn make_operator(&self, workspace: &str, username: &str) -> Result<()> {
        let call = "POST /api/w/{workspace}/users/update/{username}";
        let body = json!({"is_admin": false, "operator": true, "disabled": false});
        let answer = self
            .request(
                Method::POST,
                &format!("/api/w/{workspace}/users/update/{username}"),
                call,
                Some(&body),
                None,
            )
            .await?;
        expect_ok(call, answer)
    }

    /// `GET /api/w/{w}/folders/get/{name}`: the folder, or `None` on 404.
    pub async fn folder(&self, workspace: &str, name: &str) -> Result<Option<Folder>> {
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
            StatusCode::NOT_FOUND => Ok(None),
            _ => expect_json(call, answer).map(Some),
        }
    }

    /// `POST /api/w/{w}/acls/add/folder/{name} {"owner","write"}`: 200 `Successfully modified
    /// granular acl`.
    pub async fn set_folder_acl(&self, workspace: &str, name: &str, owner: &str, write: bool) -> Result<()> {
        let call = "POST /api/w/{workspace}/acls/add/folder/{name}";
        let answer = self
            .request(
                Method::POST,
                &format!("/api/w/{workspace}/acls/add/folder/{name}"),
                call,
                Some(&json!({"owner": owner, "write": write})),
                None,
            )
            .await?;
        expect_ok(call, answer)
    }

    /// `POST /api/w/{w}/folders/removeowner/{name} {"owner","write":false}`: out of the owners,
    /// left with read in the ACL.
    pub async fn remove_folder_owner(&self, workspace: &str, name: &str, owner: &str) -> Result<()> {
        let call = "POST /api/w/{workspace}/folders/removeowner/{name}";
        let answer = self
            .request(
                Method::POST,
                &format!("/api/w/{workspace}/folders/removeowner/{name}"),
                call,
                Some(&json!({"owner": owner, "write": false})),
                None,
            )
            .await?;
        expect_ok(call, answer)
    }
}
