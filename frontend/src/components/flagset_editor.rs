//! A flag set's label and notes, edited in place under its row of the
//! throughput list and saved with `PATCH /api/flagsets/{id}`; a saved edit
//! has the ledger fetched again.

use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::api;
use crate::state::AppState;

/// The editor of set `id`, shown while `editing` names it.
#[component]
pub(crate) fn FlagSetEditor(
    /// The id of the flag set this editor edits.
    id: String,
    /// The set whose editor is open (at most one); Cancel and Save close it.
    editing: RwSignal<Option<String>>,
) -> impl IntoView {
    let state = AppState::get();
    let open = {
        let id = id.clone();
        move || editing.with(|e| e.as_deref() == Some(id.as_str()))
    };
    move || open().then(|| form(state, id.clone(), editing))
}

/// The form, starting at the set's label and notes as the ledger has them.
fn form(state: AppState, id: String, editing: RwSignal<Option<String>>) -> impl IntoView {
    let (label, notes) = state.ledger.with_untracked(|l| {
        l.as_ref()
            .and_then(|l| l.rows.iter().find(|r| r.id == id))
            .map(|r| {
                (
                    r.label.clone().unwrap_or_default(),
                    r.notes.clone().unwrap_or_default(),
                )
            })
            .unwrap_or_default()
    });
    let edit_label = RwSignal::new(label);
    let edit_notes = RwSignal::new(notes);
    let edit_error = RwSignal::new(None::<String>);
    let saving = RwSignal::new(false);
    let save = {
        let id = id.clone();
        move || {
            if saving.get_untracked() {
                return;
            }
            saving.set(true);
            edit_error.set(None);
            let (id, label, notes) = (
                id.clone(),
                edit_label.get_untracked(),
                edit_notes.get_untracked(),
            );
            spawn_local(async move {
                let result = api::edit_flagset(&id, &label, &notes).await;
                saving.try_set(false);
                match result {
                    Ok(()) => {
                        editing.try_set(None);
                        state.ledger_gen.try_update(|g| *g += 1);
                    }
                    Err(e) => {
                        edit_error.try_set(Some(e));
                    }
                }
            });
        }
    };

    view! {
        <form
            class="fs-editor"
            data-testid="label-editor"
            data-flagset=id
            on:submit=move |ev| {
                ev.prevent_default();
                save();
            }
        >
            <label class="bench-field fs-edit-label">
                <span class="dlg-label">"label"</span>
                <input
                    class="flag-control"
                    type="text"
                    maxlength="80"
                    data-testid="label-input"
                    placeholder="e.g. baseline, +tilelang"
                    prop:value=move || edit_label.get()
                    on:input=move |ev| edit_label.set(event_target_value(&ev))
                />
            </label>
            <label class="bench-field fs-edit-notes">
                <span class="dlg-label">"notes"</span>
                <textarea
                    class="flag-control"
                    rows="2"
                    maxlength="4000"
                    data-testid="notes-input"
                    prop:value=move || edit_notes.get()
                    on:input=move |ev| edit_notes.set(event_target_value(&ev))
                ></textarea>
            </label>
            <div class="fs-edit-actions">
                <button type="submit" class="btn btn-primary" data-testid="label-save" disabled=move || saving.get()>
                    "Save"
                </button>
                <button type="button" class="btn" data-testid="label-cancel" on:click=move |_| editing.set(None)>
                    "Cancel"
                </button>
            </div>
            {move || {
                edit_error.get().map(|e| view! { <div class="dialog-error fs-edit-error" data-testid="label-error" role="alert">{e}</div> })
            }}
        </form>
    }
}
