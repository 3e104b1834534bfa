//! Workspaces and folders. Follows Windmill's server code
//! (`backend/windmill-api-workspaces/src/workspaces.rs`: `create_workspace`, the CE cap,
//! `exists_workspace`, `get_workspace_as_superadmin` (the row with its `deleted` flag: an
//! archived workspace still exists), `unarchive_workspace` (admin, `deleted = false`);
//! `windmill-api-groups/src/folders.rs`: `create_folder` (its creator its owner, with write),
//! `get_folder`, `remove_owner`; `granular_acls.rs`: `add_granular_acl` (a folder owner cannot be
//! given read only), the same from 1.509 to 1.788) and what CE 1.743.0 answered (the "Workspaces
//! and folders" rows: 200 rather than the OpenAPI's 201, the texts of duplicates, the cap
//! checked before the duplicate, the folder JSON) and 1.788 (`acls/add/folder/…` 200).

use serde::Deserialize;
use serde_json::json;

use super::FolderRow;
use super::auth::{Caller, authed, require_super_admin};
use super::members;
use super::reply::{Call, Reply, absent, json_reply, text};
use super::server::Shared;

/// `/api/workspaces/…`.
pub(super) fn route(shared: &Shared, call: &Call, segments: &[&str]) -> Result<Reply, Reply> {
    match (call.method, segments) {
        ("POST", ["workspaces", "create"]) => create_workspace(shared, call),
        ("POST", ["workspaces", "unarchive", id]) => {
            let user = authed(shared, call)?;
            // `require_admin`: a superadmin is admin on the global routes.
            require_super_admin(&user)?;
            shared.state().archived_workspaces.remove(*id);
            Ok(text(200, format!("Unarchived workspace {id}")))
        }
        ("POST", ["workspaces", "exists"]) => {
            #[derive(Deserialize)]
            struct Id {
                id: String,
            }
            authed(shared, call)?;
            let id: Id = call.json()?;
            // server code: a JSON bool; archived workspaces count too.
            Ok(json_reply(&json!(shared.state().workspaces.contains_key(&id.id))))
        }
        _ => Ok(absent()),
    }
}

/// `/api/w/{workspace}/workspaces/…`, past the route check.
pub(super) fn workspaced_route(
    shared: &Shared,
    call: &Call,
    caller: &Caller,
    workspace: &str,
    rest: &[&str],
) -> Result<Reply, Reply> {
    let user = &caller.token;
    match (call.method, rest) {
        ("POST", ["workspaces", "add_user"]) => members::add_user(shared, call, caller, workspace),
        ("GET", ["workspaces", "get_as_superadmin"]) => {
            require_super_admin(user)?;
            let state = shared.state();
            let Some(name) = state.workspaces.get(workspace) else {
                return Err(text(404, format!("Not found: workspace not found at name {workspace}")));
            };
            Ok(json_reply(
                &json!({"id": workspace, "name": name, "owner": user.email, "deleted": state.archived_workspaces.contains(workspace),
                "premium": false, "color": null, "parent_workspace_id": null}),
            ))
        }
        _ => Ok(absent()),
    }
}

/// `/api/w/{workspace}/folders/…`.
pub(super) fn folder_route(
    shared: &Shared,
    call: &Call,
    caller: &Caller,
    workspace: &str,
    rest: &[&str],
) -> Result<Reply, Reply> {
    match (call.method, rest) {
        ("GET", ["folders", "get", name]) => get_folder(shared, workspace, name),
        ("POST", ["folders", "create"]) => create_folder(shared, call, caller, workspace),
        ("POST", ["folders", "removeowner", name]) => remove_owner(shared, call, caller, workspace, name),
        _ => Ok(absent()),
    }
}

/// Whether the caller owns the folder (`is_owner`: an admin, or listed among its owners).
fn is_owner(caller: &Caller, folder: &FolderRow) -> bool {
    caller.is_admin || folder.owners.contains(&caller.permissioned_as())
}

/// `/api/w/{workspace}/acls/…`: `add/folder/<name> {"owner","write"}`.
pub(super) fn acl_route(
    shared: &Shared,
    call: &Call,
    caller: &Caller,
    workspace: &str,
    rest: &[&str],
) -> Result<Reply, Reply> {
    #[derive(Deserialize)]
    struct Acl {
        owner: String,
        write: Option<bool>,
    }
    let ("POST", ["acls", "add", "folder", name]) = (call.method, rest) else {
        return Ok(absent());
    };
    let acl: Acl = call.json()?;
    let mut state = shared.state();
    let Some(folder) = state.folders.get_mut(&(workspace.to_owned(), (*name).to_owned())) else {
        return Err(text(404, format!("Not found: folder not found at name {name}")));
    };
    if !is_owner(caller, folder) {
        return Err(text(
            401,
            format!("Not authorized: You are not owner of the folder {name}"),
        ));
    }
    if folder.owners.contains(&acl.owner) && acl.write != Some(true) {
        return Err(text(
            400,
            "Bad request: Cannot remove write permission for folder owner",
        ));
    }
    folder.extra_perms.insert(acl.owner, acl.write.unwrap_or(false));
    Ok(text(200, "Successfully modified granular acl"))
}

/// `remove_owner {"owner","write"?}`: out of the owners, and with `write` into the ACL.
fn remove_owner(shared: &Shared, call: &Call, caller: &Caller, workspace: &str, name: &str) -> Result<Reply, Reply> {
    #[derive(Deserialize)]
    struct Owner {
        owner: String,
        write: Option<bool>,
    }
    let owner: Owner = call.json()?;
    let mut state = shared.state();
    let Some(folder) = state.folders.get_mut(&(workspace.to_owned(), name.to_owned())) else {
        return Err(text(404, format!("Not found: Folder not found: {name}")));
    };
    if !is_owner(caller, folder) {
        return Err(text(
            401,
            format!("Not authorized: You are not owner of the folder {name}"),
        ));
    }
    folder.owners.retain(|o| *o != owner.owner);
    if let Some(write) = owner.write {
        folder.extra_perms.insert(owner.owner.clone(), write);
    }
    Ok(text(200, format!("Removed {} from folder {name}", owner.owner)))
}

/// Windmill's `workspace.id` check constraint `^\w+(-\w+)*$` (server code).
fn proper_workspace_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .split('-')
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_'))
}

fn create_workspace(shared: &Shared, call: &Call) -> Result<Reply, Reply> {
    #[derive(Deserialize)]
    struct CreateWorkspace {
        id: String,
        #[allow(dead_code)]
        name: String,
        username: Option<String>,
    }
    let user = authed(shared, call)?;
    // server code: superadmin only by default.
    require_super_admin(&user)?;
    let new: CreateWorkspace = call.json()?;
    let mut state = shared.state();
    // observed: the CE cap runs before the duplicate check.
    if state.workspaces.keys().filter(|id| *id != "admins").count() >= 2 {
        return Err(text(
            400,
            "Bad request: You have reached the maximum number of workspaces (2 outside of default workspace 'admins') without an enterprise license. Archive/delete another workspace to create a new one",
        ));
    }
    if state.workspaces.contains_key(&new.id) {
        return Err(text(400, format!("Bad request: Workspace {} already exists", new.id)));
    }
    if new.id == "global" {
        return Err(text(400, "Bad request: global is not a valid workspace id"));
    }
    // server code: with automated usernames (the default), a username is refused.
    if new.username.is_some_and(|u| !u.is_empty()) {
        return Err(text(
            400,
            "Bad request: username is not allowed when username creation is automated",
        ));
    }
    if !proper_workspace_id(&new.id) {
        return Err(text(
            400,
            "SqlErr: error returned from database: new row for relation \"workspace\" violates check constraint \"proper_id\" @workspaces.rs:3851:5",
        ));
    }
    state.workspaces.insert(new.id.clone(), new.name);
    Ok(text(200, format!("Created workspace {}", new.id)))
}

fn get_folder(shared: &Shared, workspace: &str, name: &str) -> Result<Reply, Reply> {
    let state = shared.state();
    let Some(folder) = state.folders.get(&(workspace.to_owned(), name.to_owned())) else {
        return Err(text(404, format!("Not found: Folder {name} not found")));
    };
    // observed: the folder JSON.
    Ok(json_reply(
        &json!({"workspace_id": workspace, "name": name, "display_name": name, "owners": folder.owners,
        "extra_perms": folder.extra_perms, "summary": null, "created_by": "admin", "edited_at": "2026-11-29T12:00:00Z",
        "default_permissioned_as": []}),
    ))
}

/// Any member may create a folder, and owns it (server code; no real server was checked for an
/// operator's).
fn create_folder(shared: &Shared, call: &Call, caller: &Caller, workspace: &str) -> Result<Reply, Reply> {
    #[derive(Deserialize)]
    struct NewFolder {
        name: String,
    }
    let exists = shared.state().workspaces.contains_key(workspace);
    let new: NewFolder = call.json()?;
    // observed: the name rule, the duplicate, and the foreign key of a missing workspace.
    if new.name.is_empty()
        || !new
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(text(
            400,
            "Bad request: Folder name can only contain alphanumeric characters, underscores, and hyphens",
        ));
    }
    let mut state = shared.state();
    if state.folders.contains_key(&(workspace.to_owned(), new.name.clone())) {
        return Err(text(400, format!("Bad request: Folder {} already exists", new.name)));
    }
    if !exists {
        return Err(text(
            500,
            "Internal: Failed to create folder: error returned from database: insert or update on table \"folder\" violates foreign key constraint \"folder_workspace_id_fkey\"",
        ));
    }
    let owner = caller.permissioned_as();
    state.folders.insert(
        (workspace.to_owned(), new.name.clone()),
        FolderRow {
            owners: vec![owner.clone()],
            extra_perms: [(owner, true)].into_iter().collect(),
        },
    );
    Ok(text(200, format!("Created folder {}", new.name)))
}
