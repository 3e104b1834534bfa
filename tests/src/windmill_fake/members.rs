//! Workspace members (the `usr` table): adding one (`workspaces/add_user`, with `operator: true`
//! for an operator, no instance account needed), listing them, the caller's own row, changing a
//! role. Follows Windmill's server code, the same from 1.509 to 1.788
//! (`windmill-api-workspaces/src/workspaces.rs`: `add_user`; `windmill-api-users/src/users.rs`:
//! `list_users`, `whoami`, `update_workspace_user`; `windmill-common/src/usernames.rs`: the
//! derived username), and what 1.587 and 1.788 answered ("Worker 10": the operator added
//! without a password, a `username` refused while usernames are automated, the username derived
//! from the email).

use serde::Deserialize;
use serde_json::{Value, json};

use super::UserRow;
use super::auth::Caller;
use super::reply::{Call, Reply, absent, json_reply, text};
use super::server::Shared;
use super::state::State;

/// `/api/w/{workspace}/users/…`, past the route check.
pub(super) fn route(
    shared: &Shared,
    call: &Call,
    caller: &Caller,
    workspace: &str,
    rest: &[&str],
) -> Result<Reply, Reply> {
    match (call.method, rest) {
        ("GET", ["users", "list"]) => {
            let state = shared.state();
            let mut list = vec![json!({
                "workspace_id": workspace, "email": crate::postgres::ADMIN_EMAIL, "username": "admin", "is_admin": true,
                "operator": false, "disabled": false, "role": "Admin", "created_at": "2026-11-29T12:00:00Z"
            })];
            list.extend(
                state
                    .users
                    .iter()
                    .filter(|((w, _), _)| w == workspace)
                    .map(|(_, u)| user_json(workspace, u)),
            );
            Ok(json_reply(&Value::Array(list)))
        }
        ("GET", ["users", "whoami"]) => Ok(json_reply(&json!({
            "workspace_id": workspace, "email": caller.token.email, "username": caller.username, "is_admin": caller.is_admin,
            "operator": caller.operator, "disabled": false, "created_at": "2026-11-29T12:00:00Z", "folders": [], "folders_owners": [],
            "groups": ["all"], "is_super_admin": caller.token.super_admin
        }))),
        ("POST", ["users", "update", username]) => update(shared, call, caller, workspace, username),
        _ => Ok(absent()),
    }
}

fn user_json(workspace: &str, user: &UserRow) -> Value {
    let role = if user.is_admin {
        "Admin"
    } else if user.operator {
        "Operator"
    } else {
        "Developer"
    };
    json!({
        "workspace_id": workspace, "email": user.email, "username": user.username, "is_admin": user.is_admin,
        "operator": user.operator, "disabled": user.disabled, "role": role, "created_at": "2026-11-29T12:00:00Z"
    })
}

/// `require_admin` (server code): a workspace admin or a superadmin.
pub(super) fn require_admin(caller: &Caller) -> Result<(), Reply> {
    if caller.is_admin {
        Ok(())
    } else {
        Err(text(403, format!("Require Admin privileges for {}", caller.username)))
    }
}

/// `POST /api/w/{w}/workspaces/add_user {"email","is_admin","operator","username"?}`: 201
/// `user with email <email> added` (server code; the reference noted a 200 on 1.788).
pub(super) fn add_user(shared: &Shared, call: &Call, caller: &Caller, workspace: &str) -> Result<Reply, Reply> {
    #[derive(Deserialize)]
    struct NewUser {
        email: String,
        #[serde(default)]
        is_admin: bool,
        #[serde(default)]
        operator: bool,
        username: Option<String>,
    }
    require_admin(caller)?;
    let new: NewUser = call.json()?;
    let email = new.email.to_lowercase();
    let mut state = shared.state();
    if state.users.contains_key(&(workspace.to_owned(), email.clone())) {
        return Err(text(
            400,
            format!("Bad request: user with email {email} already exists in workspace {workspace}"),
        ));
    }
    let username = if state.automate_usernames {
        if new.username.as_deref().is_some_and(|u| !u.is_empty()) {
            return Err(text(
                400,
                "Bad request: username is not allowed when username creation is automated",
            ));
        }
        instance_username(&mut state, &email)
    } else {
        let Some(username) = new.username else {
            return Err(text(400, "Bad request: username is required"));
        };
        if !valid_username(&username) {
            return Err(text(
                400,
                "Bad request: Usermame can only contain alphanumeric characters and underscores and must start with a letter",
            ));
        }
        username
    };
    state.users.insert(
        (workspace.to_owned(), email.clone()),
        UserRow {
            email: email.clone(),
            username,
            is_admin: new.is_admin,
            operator: new.operator,
            disabled: false,
        },
    );
    Ok(text(201, format!("user with email {email} added")))
}

/// Windmill's `VALID_USERNAME`: a letter, then letters, digits and underscores.
fn valid_username(name: &str) -> bool {
    name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `get_instance_username_or_create_pending`: the email's username if it has one, else one
/// derived from its local part (letters, digits and `_`), made unique with a number.
fn instance_username(state: &mut State, email: &str) -> String {
    if let Some(known) = state.usernames.get(email) {
        return known.clone();
    }
    let base: String = email
        .split('@')
        .next()
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    let base = if valid_username(&base) {
        base
    } else {
        format!("u{base}")
    };
    let taken = |name: &str| name == "admin" || state.usernames.values().any(|u| u == name);
    let mut name = base.clone();
    let mut n = 1;
    while taken(&name) {
        name = format!("{base}{n}");
        n += 1;
    }
    state.usernames.insert(email.to_owned(), name.clone());
    name
}

/// `update_workspace_user`: an admin changes `is_admin`, `operator`, `disabled`.
fn update(shared: &Shared, call: &Call, caller: &Caller, workspace: &str, username: &str) -> Result<Reply, Reply> {
    #[derive(Deserialize)]
    struct Edit {
        is_admin: Option<bool>,
        operator: Option<bool>,
        disabled: Option<bool>,
    }
    require_admin(caller)?;
    let edit: Edit = call.json()?;
    let mut state = shared.state();
    let Some(user) = state
        .users
        .iter_mut()
        .find(|((w, _), u)| w == workspace && u.username == username)
        .map(|(_, u)| u)
    else {
        return Err(text(404, format!("Not found: user {username} not found")));
    };
    if let Some(is_admin) = edit.is_admin {
        user.is_admin = is_admin;
    }
    if let Some(operator) = edit.operator {
        user.operator = operator;
    }
    if let Some(disabled) = edit.disabled {
        user.disabled = disabled;
    }
    Ok(text(200, format!("user {username} updated")))
}
