# frozen_string_literal: true

Rails.application.routes.draw do
  get "/orders/:tenant_id/:id", to: "orders#show"
end
