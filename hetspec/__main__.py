from hetspec.cli import main

raise SystemExit(main())
