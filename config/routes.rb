# frozen_string_literal: true

# The dashboard's routes (WebhookInbox::Engine). An event is named by its key in the query
# string (?scope=...&id=...): scopes hold ':' and provider ids may hold '/' or '.'; an
# effect likewise by its operation id (?id=...).
# Requeue and replay, of one event or of a filter, go through the confirmation page (bulk);
# requeues of effects through their own (effects/requeue). A kept refused delivery is named by
# its number (?id=...); reverify is a POST per endpoint. Pause and resume are POSTs of a
# kind (route, scope, destination) and a target (flow).
WebhookInbox::Engine.routes.draw do
  root to: "dashboard#show"
  get "events", to: "events#index", as: :events
  get "event", to: "events#show", as: :event
  get "bulk", to: "bulk#new", as: :new_bulk
  post "bulk", to: "bulk#create", as: :bulk
  get "effects", to: "effects#index", as: :effects
  get "effect", to: "effects#show", as: :effect
  get "effects/requeue", to: "effect_requeues#new", as: :new_effects_requeue
  post "effects/requeue", to: "effect_requeues#create", as: :effects_requeue
  get "refused", to: "refused#index", as: :refused_index
  get "refused/delivery", to: "refused#show", as: :refused
  post "refused/reverify", to: "refused#reverify", as: :refused_reverify
  get "actions", to: "actions#index", as: :actions
  get "flow", to: "flow#index", as: :flow
  post "flow/pause", to: "flow#pause", as: :flow_pause
  post "flow/resume", to: "flow#resume", as: :flow_resume
end
