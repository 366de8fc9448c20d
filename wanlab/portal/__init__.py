"""The portal: a web front door to the facility, as Emulab's web interface was to Netbed.

``wanlab serve`` runs it: an ASGI application (FastAPI on uvicorn) with a REST API under
``/api/`` (its OpenAPI schema at ``/api/openapi.json``), WebSockets for the live view and
consoles, and the pages bundled from ``web/`` into ``static/``.

Who may do what is Emulab's model: users belong to projects with a role (``leader`` or
``member``); an experiment created through the portal belongs to a project, and its members
see and drive it, nobody else. Local root stays the administrator (``wanlab portal ...``).

Modules, top to bottom:

* ``app``: the application: routes, pages, error mapping;
* ``live``: the WebSocket that streams an experiment's engine statistics and event log;
* ``consoles``: a node's shell on a pseudo-terminal, bridged to a WebSocket;
* ``specs``: an uploaded ns or YAML text to the IR, with the parser's line;
* ``hostres``: what an upload may name of the host (interfaces root lends, no host files);
* ``files``: the files an upload brings (sent with it, or its project's store), copied into
  the experiment's folder;
* ``auth``: passwords (scrypt), sessions, API tokens, CSRF;
* ``projects``: users, projects, members and who may touch which experiment;
* ``audit``: who did what, in the store;
* ``tables``: the portal's tables in the store's SQLite file;
* ``admin``: the root administrator's commands (``wanlab portal ...``), and ``serve``.
"""
