from specstream_core.cli import main

raise SystemExit(main())
