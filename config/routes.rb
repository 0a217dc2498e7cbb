# frozen_string_literal: true

# The dashboard's routes (WebhookInbox::Engine). An event is named by its key in the query
# string (?scope=...&id=...): scopes hold ':' and provider ids may hold '/' or '.'.
# Requeue and replay, of one event or of a filter, go through the confirmation page (bulk).
WebhookInbox::Engine.routes.draw do
  root to: "dashboard#show"
  get "events", to: "events#index", as: :events
  get "event", to: "events#show", as: :event
  get "bulk", to: "bulk#new", as: :new_bulk
  post "bulk", to: "bulk#create", as: :bulk
  get "actions", to: "actions#index", as: :actions
end
