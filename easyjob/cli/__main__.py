from easyjob.cli import main

raise SystemExit(main())
