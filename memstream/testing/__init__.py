"""Test doubles that tests and benchmarks share: an OpenAI-compatible HTTP server
(``openai_server``) and a stand-in chat model that answers memstream's prompts from their own data
(``chat_responder``). Real HTTP, no mocks; nothing in the pipeline imports them."""
