//! Global settings. Follows Windmill's server code (`backend/windmill-api/src/settings.rs`:
//! superadmin only, `{"value": …}`, `null` or `""` deletes) and what CE 1.743.0 answered (the
//! "Passwords, users and global settings" rows: `null` before a setting is set, 200 with an
//! empty body on a write, 422 for a bare value).

use serde::Deserialize;
use serde_json::{Value, json};

use super::auth::{authed, require_super_admin};
use super::reply::{Call, Reply, absent, empty, json_reply};
use super::server::Shared;

/// `/api/settings/…`.
pub(super) fn route(shared: &Shared, call: &Call, segments: &[&str]) -> Result<Reply, Reply> {
    match (call.method, segments) {
        ("GET", ["settings", "global", key]) => {
            let user = authed(shared, call)?;
            require_super_admin(&user)?;
            // observed: the stored JSON value, `null` when unset.
            Ok(json_reply(shared.state().settings.get(*key).unwrap_or(&Value::Null)))
        }
        ("POST", ["settings", "global", key]) => {
            #[derive(Deserialize)]
            struct Setting {
                value: Value,
            }
            let user = authed(shared, call)?;
            require_super_admin(&user)?;
            // observed: a bare `"3.12"` is a 422; `null` or `""` deletes; 200 with an empty body.
            let setting: Setting = call.json()?;
            let mut state = shared.state();
            if setting.value.is_null() || setting.value == json!("") {
                state.settings.remove(*key);
            } else {
                state.settings.insert((*key).to_owned(), setting.value);
            }
            Ok(empty())
        }
        _ => Ok(absent()),
    }
}
